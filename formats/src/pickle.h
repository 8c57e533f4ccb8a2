// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small pickle reader for the pickles inside torch zip archives (data.pkl, constants.pkl): the
// opcodes of protocol 2 that torch.save and the TorchScript pickler write, and a few of protocols
// 3-4 that cost nothing. It builds plain values and never runs anything: a call of a global
// (REDUCE, NEWOBJ) becomes an opaque object that names the global and keeps its arguments, so the
// caller decides what a torch._utils._rebuild_tensor_v2 call means and skips what it does not
// know. The one exception is collections.OrderedDict(), which becomes a dict. Persistent ids
// (BINPERSID) stay values too. Values are shared as the memo shares them: the same object pickled
// twice (tied weights) is one PickleRef.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::detail {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict, kGlobal, kObject, kPersistentId };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  // kString, kBytes: the text; kGlobal, kObject: the global's "module.name".
  std::string text;
  // kTuple, kList: the items; kObject: the call's arguments; kPersistentId: the one id value.
  std::vector<PickleRef> items;
  // kDict: the entries in insertion order; kObject: entries set on it by SETITEM(S).
  std::vector<std::pair<PickleRef, PickleRef>> entries;
  // kObject: what BUILD set (usually a dict of attributes); null when BUILD was not applied.
  PickleRef state;

  bool is(Kind k) const { return kind == k; }

  PickleValue() = default;
  PickleValue(const PickleValue&) = default;
  PickleValue& operator=(const PickleValue&) = default;
  // Frees the values only this one holds without recursion: a pickle of a few MB can nest a
  // million lists, which a recursive destructor would overflow the stack on.
  ~PickleValue();
};

// Parses `bytes` (a whole pickle) up to its STOP and returns the value it leaves. `where` names it
// in errors (e.g. "'model.pt': data.pkl"): IoError for an unknown opcode (its byte and offset), a
// pickle that ends early, or one whose stack does not fit its opcodes.
PickleRef read_pickle(const std::string& bytes, const std::string& where);

}  // namespace zeroshard::detail
