// SPDX-License-Identifier: Apache-2.0
// The tensors of a torch pickle (torch_pickle.h): a walk over the values read_pickle built.

#include "torch_pickle.h"

#include <set>
#include <unordered_map>

#include "zeroshard/base/error.h"

namespace zeroshard::detail {
namespace {

using Kind = PickleValue::Kind;

struct StorageType {
  const char* global;
  c10::ScalarType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", c10::kFloat}, {"torch.BFloat16Storage", c10::kBFloat16}, {"torch.HalfStorage", c10::kHalf},
    {"torch.DoubleStorage", c10::kDouble}, {"torch.LongStorage", c10::kLong},       {"torch.IntStorage", c10::kInt},
    {"torch.ShortStorage", c10::kShort}, {"torch.CharStorage", c10::kChar},         {"torch.ByteStorage", c10::kByte},
    {"torch.BoolStorage", c10::kBool},
};

bool is_tensor_call(const PickleValue& v) {
  return v.is(Kind::kObject) && (v.text == "torch._utils._rebuild_tensor_v2" || v.text == "torch._utils._rebuild_tensor");
}

// Calls whose result is their first argument, as far as the tensors are concerned.
bool is_passthrough_call(const PickleValue& v) {
  if (!v.is(Kind::kObject) || v.items.empty()) return false;
  return v.text == "torch._utils._rebuild_parameter" || v.text == "torch._utils._rebuild_parameter_with_state" ||
         v.text.rfind("torch.jit._pickle.build_", 0) == 0 || v.text == "torch.jit._pickle.restore_type_tag";
}

std::string join(const std::string& prefix, const std::string& key) { return prefix.empty() ? key : prefix + "." + key; }

// Containers nested deeper than this are refused: no torch file comes near it, and the walk
// recurses once per level.
constexpr int kMaxDepth = 1000;
// More tensor names than this are refused: a container shared under many paths (the memo lets a
// ~1 KB pickle reach one list 2^64 ways) would otherwise name its tensors without end.
constexpr size_t kMaxNames = size_t{1} << 20;

class TensorWalk {
 public:
  TensorWalk(std::string record_dir, const std::string& where) : record_dir_(std::move(record_dir)), where_(where) {}

  // Each container is walked once: reached again (the memo shares it), the tensors found under it
  // the first time are named again under the new path, so the walk is linear in the pickle's
  // values plus the names it produces.
  void walk(const PickleRef& v, const std::string& name, int depth = 0) {
    if (is_tensor_call(*v)) return emit(tensor(*v, name));
    if (!v->is(Kind::kObject) && !v->is(Kind::kDict) && !v->is(Kind::kList) && !v->is(Kind::kTuple)) return;
    if (depth >= kMaxDepth) {
      ZS_THROW(IoError, where_, ": values nested deeper than ", kMaxDepth, " containers (at '", name,
               "'): not a file torch writes");
    }
    if (auto it = found_.find(v.get()); it != found_.end()) {
      if (out.size() + it->second.size() > kMaxNames) too_many_names(name);
      for (const auto& [suffix, index] : it->second) rename(index, name, suffix);
      return;
    }
    if (!on_path_.insert(v.get()).second) return;  // a cycle (an object holding itself)
    const size_t first = out.size();
    if (is_passthrough_call(*v)) walk(v->items[0], name, depth + 1);
    else if (v->is(Kind::kObject)) object(*v, name, depth + 1);
    else if (v->is(Kind::kDict)) entries(*v, name, depth + 1);
    else items(*v, name, depth + 1);
    on_path_.erase(v.get());
    auto& found = found_[v.get()];
    for (size_t i = first; i < out.size(); ++i) found.emplace_back(suffix_of(out[i].name, name), i);
  }

  std::vector<PickledTensor> out;

 private:
  void emit(PickledTensor t) {
    if (out.size() >= kMaxNames) too_many_names(t.name);
    out.push_back(std::move(t));
  }
  [[noreturn]] void too_many_names(const std::string& at) const {
    ZS_THROW(IoError, where_, ": more than ", kMaxNames, " tensor names (containers shared under too many paths, at '",
             at, "'): not a file torch writes");
  }
  // out[index] again, named `name` + `suffix` (see suffix_of).
  void rename(size_t index, const std::string& name, const std::string& suffix) {
    PickledTensor t = out[index];
    t.name = name.empty() ? (suffix.empty() ? suffix : suffix.substr(1)) : name + suffix;
    emit(std::move(t));
  }
  // What `full` adds to the container's `name`, as if the name were not empty: "" or ".a.b".
  static std::string suffix_of(const std::string& full, const std::string& name) {
    if (name.empty()) return full.empty() ? full : "." + full;
    return full.substr(name.size());
  }

 private:
  void object(const PickleValue& v, const std::string& name, int depth) {
    if (v.text.rfind("torch._utils._rebuild_", 0) == 0) {
      ZS_THROW(IoError, where_, ": tensor '", name, "' is rebuilt by ", v.text,
               ", which zeroshard does not read (only dense tensors: _rebuild_tensor_v2, _rebuild_parameter)");
    }
    if (v.state) walk(v.state, name, depth);
    entries(v, name, depth);
  }
  void entries(const PickleValue& v, const std::string& name, int depth) {
    for (const auto& [key, value] : v.entries) {
      if (key->is(Kind::kString)) walk(value, join(name, key->text), depth);
      else if (key->is(Kind::kInt)) walk(value, join(name, std::to_string(key->integer)), depth);
    }
  }
  void items(const PickleValue& v, const std::string& name, int depth) {
    for (size_t i = 0; i < v.items.size(); ++i) walk(v.items[i], join(name, std::to_string(i)), depth);
  }

  [[noreturn]] void bad(const std::string& name, const std::string& what) const {
    ZS_THROW(IoError, where_, ": tensor '", name, "' has a malformed rebuild call: ", what);
  }
  std::vector<int64_t> ints(const PickleRef& v, const std::string& name, const char* what) const {
    if (!v->is(Kind::kTuple) && !v->is(Kind::kList)) bad(name, std::string(what) + " is not a tuple");
    std::vector<int64_t> out;
    for (const PickleRef& i : v->items) {
      if (!i->is(Kind::kInt)) bad(name, std::string(what) + " holds a value that is not an integer");
      out.push_back(i->integer);
    }
    return out;
  }
  // args: storage (a persistent id), storage_offset, size, stride, ...
  PickledTensor tensor(const PickleValue& call, const std::string& name) const {
    const auto& args = call.items;
    if (args.size() < 4) bad(name, std::to_string(args.size()) + " arguments, expected at least 4");
    PickledTensor t;
    t.name = name;
    storage(*args[0], t);
    if (!args[1]->is(Kind::kInt)) bad(name, "the storage offset is not an integer");
    t.storage_offset = args[1]->integer;
    t.shape = ints(args[2], name, "the size");
    t.strides = ints(args[3], name, "the stride");
    if (t.shape.size() != t.strides.size()) bad(name, "the size and the stride differ in length");
    return t;
  }
  // ('storage', torch.<Type>Storage, key, location, numel)
  void storage(const PickleValue& pid, PickledTensor& t) const {
    if (!pid.is(Kind::kPersistentId) || !pid.items[0]->is(Kind::kTuple)) bad(t.name, "the storage is not a persistent id");
    const auto& f = pid.items[0]->items;
    if (f.size() < 3 || !f[0]->is(Kind::kString) || f[0]->text != "storage" || !f[1]->is(Kind::kGlobal) ||
        !f[2]->is(Kind::kString)) {
      bad(t.name, "the persistent id is not ('storage', torch.<Type>Storage, key, ...)");
    }
    if (!storage_dtype(f[1]->text, t.dtype)) {
      ZS_THROW(IoError, where_, ": tensor '", t.name, "' is stored as ", f[1]->text,
               ", which zeroshard does not read (float32/64, bfloat16, float16, int8/16/32/64, uint8, bool)");
    }
    t.record = record_dir_ + "/" + f[2]->text;
  }

  std::string record_dir_;
  const std::string& where_;
  std::set<const PickleValue*> on_path_;
  // The containers walked so far: their tensors as (name suffix, index into out).
  std::unordered_map<const PickleValue*, std::vector<std::pair<std::string, size_t>>> found_;
};

}  // namespace

bool storage_dtype(const std::string& global, c10::ScalarType& dtype) {
  for (const StorageType& s : kStorageTypes) {
    if (global == s.global) {
      dtype = s.dtype;
      return true;
    }
  }
  return false;
}

std::vector<PickledTensor> pickled_tensors(const PickleRef& root, const std::string& prefix,
                                           const std::string& record_dir, const std::string& where) {
  TensorWalk w(record_dir, where);
  w.walk(root, prefix);
  return std::move(w.out);
}

}  // namespace zeroshard::detail
