// SPDX-License-Identifier: Apache-2.0
#pragma once
// Two flat open-addressing hash maps for the tokenizer's hot path: token text -> id (looked up
// by string_view, no allocation) and a pair of ids -> merge (rank, merged id). Built once at load,
// read-only afterwards (safe to read from any number of threads).

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text::detail {

inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Every output bit depends on every input byte (the final mix), so the low bits index tables.
inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix64(h ^ tail);
}

// Text -> int32 value. Keys are copied into one arena; slots keep 32 bits of the hash, so a probe
// compares bytes only when those match.
class StringIdMap {
 public:
  // Inserts or overwrites; returns false when the key was already there.
  bool insert(std::string_view key, int32_t value) {
    if ((count_ + 1) * 4 >= slots_.size() * 3) grow();
    const uint64_t h = hash_bytes(key);
    Slot& s = slots_[locate(key, h)];
    if (s.used) {
      s.value = value;
      return false;
    }
    s = Slot{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), value,
             static_cast<uint32_t>(h >> 32), true};
    arena_.append(key);
    ++count_;
    return true;
  }
  const int32_t* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[locate(key, hash_bytes(key))];
    return s.used ? &s.value : nullptr;
  }
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint32_t offset = 0, length = 0;
    int32_t value = 0;
    uint32_t tag = 0;  // the hash's high half
    bool used = false;
  };
  size_t locate(std::string_view key, uint64_t h) const {
    const size_t mask = slots_.size() - 1;
    const auto tag = static_cast<uint32_t>(h >> 32);
    size_t i = h & mask;
    while (slots_[i].used && (slots_[i].tag != tag || slots_[i].length != key.size() ||
                              std::memcmp(arena_.data() + slots_[i].offset, key.data(), key.size()) != 0)) {
      i = (i + 1) & mask;
    }
    return i;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (!s.used) continue;
      size_t i = hash_bytes(std::string_view(arena_.data() + s.offset, s.length)) & mask;
      while (slots_[i].used) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t count_ = 0;
};

// (left id, right id) -> (rank, merged id).
class MergeMap {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  void insert(int32_t left, int32_t right, Merge merge) {
    if ((count_ + 1) * 2 >= slots_.size()) grow();
    Slot& s = slots_[locate(key_of(left, right))];
    if (!s.used) ++count_;
    s = Slot{key_of(left, right), merge, true};
  }
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[locate(key_of(left, right))];
    return s.used ? &s.merge : nullptr;
  }
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t key = 0;
    Merge merge{0, 0};
    bool used = false;
  };
  static uint64_t key_of(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t locate(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    size_t i = mix64(key) & mask;
    while (slots_[i].used && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    for (const Slot& s : old) {
      if (s.used) slots_[locate(s.key)] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

}  // namespace zeroshard::text::detail
