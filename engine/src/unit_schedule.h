// SPDX-License-Identifier: Apache-2.0
#pragma once
// UnitSchedule: the order units run in and what to gather ahead. The first forward records the
// order as units run (first calls only); from the first backward on, every forward's sequence (as
// all ranks agreed on it, unit_order.cpp) re-records it. A forward prefetches the next unit in that
// order, a backward the previous one that runs backward in this pass (idle units skipped), never
// more than limit_all_gathers units with gathers in flight at once.

#include <memory>
#include <vector>

#include "sharded_unit.h"

namespace zeroshard::detail {

class UnitSchedule {
 public:
  UnitSchedule(const std::vector<std::unique_ptr<ShardedUnit>>& units, int limit_all_gathers)
      : units_(units), limit_(limit_all_gathers) {}

  bool recording() const { return recording_; }
  void stop_recording() { recording_ = false; }
  // While recording: appends `u` when it is not in the order yet.
  void record(ShardedUnit* u);
  // Replaces the order (units' forward_index follow); false when it is the same.
  bool rerecord(std::vector<ShardedUnit*> order);
  const std::vector<ShardedUnit*>& order() const { return order_; }

  // The unit at `index` in the order, or in backward the first one at or before it that runs
  // backward this pass; null when there is none.
  ShardedUnit* unit_at(int index, bool backward) const;
  // Starts gathering the unit unit_at(index, backward) unless recording, gathered, in flight, or
  // the in-flight limit is reached.
  void prefetch(int index, bool backward);
  // The unit whose offloaded shards to read ahead once `u`'s gather started (the one prefetch
  // would gather next), or null.
  ShardedUnit* next_after(const ShardedUnit& u, bool backward) const;

 private:
  int inflight() const;

  const std::vector<std::unique_ptr<ShardedUnit>>& units_;
  int limit_;
  bool recording_ = true;  // until the first backward completes
  std::vector<ShardedUnit*> order_;
};

}  // namespace zeroshard::detail
