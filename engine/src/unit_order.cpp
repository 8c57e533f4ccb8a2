// SPDX-License-Identifier: Apache-2.0
// The per-forward check that every rank ran the same units in the same order, and the prefetch
// order re-recorded from what the forward ran.
//
// Ranks that run different units (a data-dependent branch, an early exit) pair up all-gathers of
// different units: units of equal size then compute with another unit's weights and nothing
// fails. With forward prefetch (the default) every rank still issues the gathers of the recorded
// order, so the collectives stay paired and the check below, at the start of backward, sees the
// difference before any backward collective is issued. Divergences that change the collectives
// themselves before that point (no prefetch, units the recorded order does not hold) can block a
// rank in a collective its peers never issue: the watchdog names it, and comm.check_signatures
// catches it at the first mismatched collective.
//
// The shard group is checked at once at the start of backward (its ranks wait for each other at
// the backward's first collective anyway); replicas (NO_SHARD, HYBRID_SHARD) only at the end of
// backward, so that a late replica does not hold the others' backward up: their all-reduces of
// different units are then found before their results become gradients, if they completed (units
// of different sizes can fail in the communicator or leave a rank waiting instead).
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <sstream>

#include "unit_order.h"
#include "zeroshard/base/error.h"

namespace zeroshard {

namespace {

using OrderExchange = detail::UnitOrderCheck::Exchange;

int64_t sequence_hash(const std::vector<int32_t>& seq) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int32_t v : seq) {
    h ^= static_cast<uint32_t>(v);
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

// Starts the all-gather of {hash, length, world rank} over `group` (CPU tensors).
OrderExchange start_exchange(Communicator& group, const std::vector<int32_t>& seq, int world_rank) {
  OrderExchange ex;
  ex.group = &group;
  ex.sequence = seq;
  ex.mine = at::empty({3}, at::kLong);
  ex.mine[0] = sequence_hash(seq);
  ex.mine[1] = static_cast<int64_t>(seq.size());
  ex.mine[2] = world_rank;
  ex.all = at::empty({3 * group.size()}, at::kLong);
  ex.work = group.all_gather_into(ex.all, ex.mine, "zs.unit_order");
  return ex;
}

std::string describe(const std::vector<int32_t>& seq, const std::vector<std::unique_ptr<detail::ShardedUnit>>& units) {
  constexpr size_t kMaxNames = 16;
  std::ostringstream os;
  for (size_t i = 0; i < seq.size() && i < kMaxNames; ++i) os << (i ? ", " : "") << "'" << units[seq[i]]->name << "'";
  if (seq.size() > kMaxNames) os << ", ... (" << seq.size() << " in all)";
  return os.str();
}

// The ranks grouped by the sequence they ran (its hash and length: `v` holds hash, length, rank
// per rank), each group named by its first rank.
std::string ranks_by_sequence(const int64_t* v, int n) {
  std::ostringstream ranks;
  std::vector<bool> told(n, false);
  for (int k = 0; k < n; ++k) {
    if (told[k]) continue;
    ranks << (k ? "; " : "") << "ranks {";
    for (int j = k; j < n; ++j) {
      if (told[j] || v[3 * j] != v[3 * k] || v[3 * j + 1] != v[3 * k + 1]) continue;
      ranks << (j == k ? "" : ", ") << v[3 * j + 2];
      told[j] = true;
    }
    ranks << "} ran one sequence of " << v[3 * k + 1] << " unit(s)";
  }
  return ranks.str();
}

// Waits for `ex`; when the ranks' sequences differ, throws UsageError on every rank of the group.
// With `exchange_sequences` (no other collective of the group can be pending unpaired), the
// sequences are exchanged (every rank saw the same hashes, so every one is here) and the error
// names the first unit where they differ; otherwise it names the ranks that differ and this
// rank's own sequence.
void verify_exchange(OrderExchange& ex, const std::vector<std::unique_ptr<detail::ShardedUnit>>& units,
                     const char* where, bool exchange_sequences) {
  if (!ex.work) return;
  std::shared_ptr<Work> work = std::move(ex.work);
  ex.work = nullptr;
  work->wait();
  Communicator& group = *ex.group;
  const int n = group.size();
  const int64_t* v = ex.all.data_ptr<int64_t>();
  bool same = true;
  int64_t longest = 0;
  for (int k = 0; k < n; ++k) {
    same = same && v[3 * k] == v[0] && v[3 * k + 1] == v[1];
    longest = std::max(longest, v[3 * k + 1]);
  }
  if (same) return;
  if (!exchange_sequences) {
    ZS_THROW(UsageError, "ranks ran different units in this forward (found ", where, "): ", ranks_by_sequence(v, n),
             ". This rank ran ", describe(ex.sequence, units), ". Their collectives were paired with another "
             "unit's, so the results are wrong; every rank must run the same units in the same order (make "
             "data-dependent branches and early exits agree across ranks). comm.check_signatures = true stops "
             "at the first mismatched collective instead");
  }
  at::Tensor local = at::full({longest}, -1, at::kLong);
  for (size_t i = 0; i < ex.sequence.size(); ++i) local[static_cast<int64_t>(i)] = static_cast<int64_t>(ex.sequence[i]);
  at::Tensor seqs = at::empty({longest * n}, at::kLong);
  group.all_gather_into(seqs, local, "zs.unit_order.sequences")->wait();
  const int64_t* q = seqs.data_ptr<int64_t>();
  int64_t pos = 0;
  auto differs = [&](int64_t i) {
    for (int k = 0; k < n; ++k) {
      if (q[k * longest + i] != q[i]) return true;
    }
    return false;
  };
  while (pos < longest && !differs(pos)) ++pos;
  std::ostringstream ranks;
  for (int k = 0; k < n; ++k) {
    const int64_t o = pos < longest ? q[k * longest + pos] : -1;
    ranks << (k ? ", " : "") << "rank " << v[3 * k + 2] << " ran "
          << (o < 0 || o >= static_cast<int64_t>(units.size()) ? std::string("no unit (its forward had ended)")
                                                              : "unit '" + units[o]->name + "'");
  }
  ZS_THROW(UsageError, "ranks ran different units in this forward (found ", where, "): as unit #", pos + 1,
           " of the forward, ", ranks.str(), ". Their collectives were paired with another unit's, so the "
           "results are wrong; every rank must run the same units in the same order (make data-dependent "
           "branches and early exits agree across ranks). comm.check_signatures = true stops at the first "
           "mismatched collective instead");
}

}  // namespace

detail::UnitOrderCheck::UnitOrderCheck(Communicator& world, Communicator& host_shard, Communicator* host_replicate,
                                       const std::vector<std::unique_ptr<ShardedUnit>>& units)
    : world_(world), host_shard_(host_shard), host_replicate_(host_replicate), units_(units) {}

void detail::UnitOrderCheck::begin_forward() {
  sequence_.clear();
  checked_ = false;
}

bool detail::UnitOrderCheck::at_backward() {
  if (checked_) return false;
  checked_ = true;
  const int me = world_.rank();
  if (host_replicate_ != nullptr && host_replicate_->size() > 1) {
    replicas_ = start_exchange(*host_replicate_, sequence_, me);
  }
  if (host_shard_.size() > 1) {
    OrderExchange ex = start_exchange(host_shard_, sequence_, me);
    verify_exchange(ex, units_, "at the start of backward", /*exchange_sequences=*/true);
  }
  return true;
}

void detail::UnitOrderCheck::finish_replicas() {
  // The replicas' all-reduces were issued after the check: unpaired ones may be pending.
  verify_exchange(replicas_, units_, "at the end of backward, across replicas", /*exchange_sequences=*/false);
}

bool detail::UnitOrderCheck::now(const char* where) {
  if (checked_) return false;
  checked_ = true;
  if (world_.size() > 1) {
    OrderExchange ex = start_exchange(world_, sequence_, world_.rank());
    verify_exchange(ex, units_, where, /*exchange_sequences=*/true);
  }
  return true;
}

void detail::UnitOrderCheck::abandon() noexcept {
  if (!replicas_.work) return;  // issued by every replica at the same point
  try {
    replicas_.work->wait();
  } catch (...) {
  }
  replicas_ = Exchange{};
}

}  // namespace zeroshard
