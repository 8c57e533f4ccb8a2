// SPDX-License-Identifier: Apache-2.0
#pragma once
// UnitOrderCheck: the check that every rank ran the same units in the same order in a forward
// (unit_order.cpp says why it matters and when each group is checked). It keeps the forward's unit
// sequence (ordinals; a unit called twice appears twice; recomputations excluded), which the
// engine then makes the schedule's order.

#include <cstdint>
#include <memory>
#include <vector>

#include "sharded_unit.h"
#include "zeroshard/comm/communicator.h"

namespace zeroshard::detail {

class UnitOrderCheck {
 public:
  // `world`: every rank; `host_shard` / `host_replicate` (null when not replicated): the groups on
  // the host communicator. `units`: the engine's, for the names in the messages.
  UnitOrderCheck(Communicator& world, Communicator& host_shard, Communicator* host_replicate,
                 const std::vector<std::unique_ptr<ShardedUnit>>& units);

  // A root forward starts: a new, unchecked sequence.
  void begin_forward();
  void record(int32_t ordinal) { sequence_.push_back(ordinal); }
  const std::vector<int32_t>& sequence() const { return sequence_; }
  // A forward ran units and no check has looked at them yet.
  bool unchecked() const { return !checked_ && !sequence_.empty(); }

  // Each throws UsageError on every rank of the group alike when the sequences differ, and returns
  // false when this forward was checked already (nothing done). At the first pre-backward hook:
  // the shard group at once, the replicas started without waiting (a late replica must not hold
  // the backward up) and verified by finish_replicas at the end of backward.
  bool at_backward();
  // All ranks at once: at the end of a forward without grad, and at the next forward after one
  // with grad that no backward followed (`where` says which).
  bool now(const char* where);
  void finish_replicas();
  // After a failed pass: waits for the replicas' exchange, if one is in flight. Never throws.
  void abandon() noexcept;

  // One all-gather in flight (or done) of {hash, length, world rank} over `group`.
  struct Exchange {
    std::shared_ptr<Work> work;  // null when none is in flight
    at::Tensor mine, all;
    Communicator* group = nullptr;
    std::vector<int32_t> sequence;  // what was exchanged (the engine's sequence may move on)
  };

 private:
  Communicator& world_;
  Communicator& host_shard_;
  Communicator* host_replicate_;
  const std::vector<std::unique_ptr<ShardedUnit>>& units_;
  std::vector<int32_t> sequence_;
  bool checked_ = false;  // for this forward
  Exchange replicas_;
};

}  // namespace zeroshard::detail
