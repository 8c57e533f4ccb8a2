// SPDX-License-Identifier: Apache-2.0
// The pickle reader (pickle.h): a stack machine over the opcodes torch's pickles use.

#include "pickle.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "zeroshard/base/error.h"

namespace zeroshard::detail {
namespace {

using Kind = PickleValue::Kind;

PickleRef make(Kind k) {
  auto v = std::make_shared<PickleValue>();
  v->kind = k;
  return v;
}

PickleRef make_int(int64_t i) {
  PickleRef v = make(Kind::kInt);
  v->integer = i;
  return v;
}

PickleRef make_text(Kind k, std::string s) {
  PickleRef v = make(k);
  v->text = std::move(s);
  return v;
}

class PickleMachine {
 public:
  PickleMachine(const std::string& bytes, const std::string& where) : in_(bytes), where_(where) {}

  PickleRef run() {
    for (;;) {
      op_at_ = pos_;
      const uint8_t op = u8();
      if (op == '.') break;  // STOP
      step(op);
    }
    if (stack_.size() != 1 || !marks_.empty()) fail("STOP leaves " + std::to_string(stack_.size()) + " values");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    ZS_THROW(IoError, where_, ": malformed pickle at offset ", op_at_, ": ", what);
  }

  // ---- input ----
  const char* take(size_t n) {
    if (n > in_.size() - pos_) {
      ZS_THROW(IoError, where_, ": the pickle ends at byte ", in_.size(), " inside the opcode at offset ", op_at_,
               " (truncated)");
    }
    const char* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t little(size_t n) {
    const auto* p = reinterpret_cast<const unsigned char*>(take(n));
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(little(1)); }
  std::string bytes(uint64_t n) {
    if (n > in_.size()) take(in_.size() + 1);  // an impossible length: report the truncation
    return std::string(take(static_cast<size_t>(n)), static_cast<size_t>(n));
  }
  std::string line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string::npos) take(in_.size() - pos_ + 1);
    std::string s = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  double binfloat() {  // 8 bytes, big-endian IEEE 754
    const auto* p = reinterpret_cast<const unsigned char*>(take(8));
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    return d;
  }
  int64_t long1() {  // little-endian two's complement of 0..8 bytes
    const uint8_t n = u8();
    if (n > 8) fail("LONG1 of " + std::to_string(n) + " bytes does not fit 64 bits");
    if (n == 0) return 0;
    uint64_t v = little(n);
    if (n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }

  // ---- stack ----
  void push(PickleRef v) { stack_.push_back(std::move(v)); }
  PickleRef pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) fail("the stack is empty");
    PickleRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  PickleRef& top() {
    if (stack_.empty()) fail("the stack is empty");
    return stack_.back();
  }
  // The values above the last MARK, which is removed.
  std::vector<PickleRef> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return items;
  }
  void put(uint64_t key) { memo_[key] = top(); }
  void get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " was never stored");
    push(it->second);
  }

  // ---- opcodes ----
  void step(uint8_t op);
  void tuple(std::vector<PickleRef> items) {
    PickleRef t = make(Kind::kTuple);
    t->items = std::move(items);
    push(std::move(t));
  }
  void tuple_of(size_t n) {
    std::vector<PickleRef> items(n);
    for (size_t i = n; i-- > 0;) items[i] = pop();
    tuple(std::move(items));
  }
  void set_items(std::vector<PickleRef> kv) {
    if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values");
    PickleRef& d = top();
    if (!d->is(Kind::kDict) && !d->is(Kind::kObject)) fail("SETITEM(S) on a value that is not a dict");
    for (size_t i = 0; i < kv.size(); i += 2) d->entries.emplace_back(kv[i], kv[i + 1]);
  }
  void append(std::vector<PickleRef> items) {
    PickleRef& l = top();
    if (!l->is(Kind::kList) && !l->is(Kind::kObject)) fail("APPEND(S) on a value that is not a list");
    for (PickleRef& v : items) l->items.push_back(std::move(v));
  }
  void global(std::string module, std::string name) { push(make_text(Kind::kGlobal, module + "." + name)); }
  // REDUCE and NEWOBJ: a call of a global, kept as an object (collections.OrderedDict(): a dict).
  void call(const char* opname) {
    PickleRef args = pop();
    PickleRef fn = pop();
    if (!fn->is(Kind::kGlobal)) fail(std::string(opname) + " of a value that is not a global");
    if (!args->is(Kind::kTuple)) fail(std::string(opname) + " with arguments that are not a tuple");
    if (fn->text == "collections.OrderedDict" && args->items.empty()) return push(make(Kind::kDict));
    PickleRef obj = make_text(Kind::kObject, fn->text);
    obj->items = args->items;
    push(std::move(obj));
  }
  // BUILD: an object keeps its state; a dict (an OrderedDict's attributes, e.g. a state dict's
  // _metadata) drops it: attributes are not items.
  void build() {
    PickleRef state = pop();
    PickleRef& obj = top();
    if (obj->is(Kind::kObject)) obj->state = std::move(state);
    else if (!obj->is(Kind::kDict)) fail("BUILD on a value that is neither an object nor a dict");
  }
  void persistent_id() {
    PickleRef pid = make(Kind::kPersistentId);
    pid->items.push_back(pop());
    push(std::move(pid));
  }
  [[noreturn]] void unknown(uint8_t op) const {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", op);
    const std::string shown = op >= 0x20 && op < 0x7f ? std::string(" ('") + static_cast<char>(op) + "')" : "";
    ZS_THROW(IoError, where_, ": unsupported pickle opcode ", hex, shown, " at offset ", op_at_,
             " (zeroshard reads the pickles torch.save and torch.jit.save write, protocol 2)");
  }

  const std::string& in_;
  const std::string& where_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PickleRef> memo_;
};

void PickleMachine::step(uint8_t op) {
  switch (op) {
    case 0x80: u8(); return;                                  // PROTO
    case 0x95: little(8); return;                             // FRAME (protocol 4): no meaning here
    case '(': marks_.push_back(stack_.size()); return;        // MARK
    case '0': pop(); return;                                  // POP
    case '1': pop_mark(); return;                             // POP_MARK
    case '2': push(top()); return;                            // DUP
    case 'N': return push(make(Kind::kNone));                 // NONE
    case 0x88: case 0x89: {                                   // NEWTRUE, NEWFALSE
      PickleRef b = make(Kind::kBool);
      b->boolean = op == 0x88;
      return push(std::move(b));
    }
    case 'J': return push(make_int(static_cast<int32_t>(little(4))));  // BININT
    case 'K': return push(make_int(static_cast<int64_t>(little(1))));  // BININT1
    case 'M': return push(make_int(static_cast<int64_t>(little(2))));  // BININT2
    case 0x8a: return push(make_int(long1()));                         // LONG1
    case 'G': {                                                        // BINFLOAT
      PickleRef f = make(Kind::kFloat);
      f->real = binfloat();
      return push(std::move(f));
    }
    case 'X': return push(make_text(Kind::kString, bytes(little(4))));   // BINUNICODE
    case 0x8c: return push(make_text(Kind::kString, bytes(little(1))));  // SHORT_BINUNICODE
    case 0x8d: return push(make_text(Kind::kString, bytes(little(8))));  // BINUNICODE8
    case 'T': return push(make_text(Kind::kString, bytes(little(4))));   // BINSTRING (Python 2 str)
    case 'U': return push(make_text(Kind::kString, bytes(little(1))));   // SHORT_BINSTRING
    case 'B': return push(make_text(Kind::kBytes, bytes(little(4))));    // BINBYTES
    case 'C': return push(make_text(Kind::kBytes, bytes(little(1))));    // SHORT_BINBYTES
    case '}': return push(make(Kind::kDict));                            // EMPTY_DICT
    case ']': return push(make(Kind::kList));                            // EMPTY_LIST
    case ')': return tuple({});                                          // EMPTY_TUPLE
    case 't': return tuple(pop_mark());                                  // TUPLE
    case 0x85: return tuple_of(1);                                       // TUPLE1
    case 0x86: return tuple_of(2);                                       // TUPLE2
    case 0x87: return tuple_of(3);                                       // TUPLE3
    case 'l': {                                                          // LIST
      PickleRef l = make(Kind::kList);
      l->items = pop_mark();
      return push(std::move(l));
    }
    case 's': {                                                          // SETITEM
      PickleRef v = pop(), k = pop();
      return set_items({k, v});
    }
    case 'u': return set_items(pop_mark());                              // SETITEMS
    case 'a': return append({pop()});                                    // APPEND
    case 'e': return append(pop_mark());                                 // APPENDS
    case 'q': return put(little(1));                                     // BINPUT
    case 'r': return put(little(4));                                     // LONG_BINPUT
    case 0x94: return put(memo_.size());                                 // MEMOIZE
    case 'h': return get(little(1));                                     // BINGET
    case 'j': return get(little(4));                                     // LONG_BINGET
    case 'c': {                                                          // GLOBAL
      std::string module = line();
      return global(std::move(module), line());
    }
    case 0x93: {                                                         // STACK_GLOBAL
      PickleRef name = pop(), module = pop();
      if (!name->is(Kind::kString) || !module->is(Kind::kString)) fail("STACK_GLOBAL of values that are not strings");
      return global(module->text, name->text);
    }
    case 'Q': return persistent_id();                                    // BINPERSID
    case 'R': return call("REDUCE");                                     // REDUCE
    case 0x81: return call("NEWOBJ");                                    // NEWOBJ
    case 'b': return build();                                            // BUILD
    default: unknown(op);
  }
}

}  // namespace

PickleValue::~PickleValue() {
  std::vector<PickleRef> pending;
  auto take_children = [&pending](PickleValue& v) {
    for (PickleRef& i : v.items) pending.push_back(std::move(i));
    for (auto& [k, x] : v.entries) {
      pending.push_back(std::move(k));
      pending.push_back(std::move(x));
    }
    if (v.state) pending.push_back(std::move(v.state));
    v.items.clear();
    v.entries.clear();
  };
  take_children(*this);
  while (!pending.empty()) {
    PickleRef v = std::move(pending.back());
    pending.pop_back();
    // The last owner: empty it first, so that its destructor (at the end of this scope) has nothing
    // left to free. Values are not shared across threads, so the count is exact.
    if (v && v.use_count() == 1) take_children(*v);
  }
}

PickleRef read_pickle(const std::string& bytes, const std::string& where) {
  return PickleMachine(bytes, where).run();
}

}  // namespace zeroshard::detail
