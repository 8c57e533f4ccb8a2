// SPDX-License-Identifier: Apache-2.0
#include "unit_schedule.h"

#include <utility>

namespace zeroshard::detail {

void UnitSchedule::record(ShardedUnit* u) {
  if (!recording_ || u->forward_index >= 0) return;
  u->forward_index = static_cast<int>(order_.size());
  order_.push_back(u);
}

bool UnitSchedule::rerecord(std::vector<ShardedUnit*> order) {
  if (order == order_) return false;
  for (const auto& u : units_) u->forward_index = -1;
  for (size_t i = 0; i < order.size(); ++i) order[i]->forward_index = static_cast<int>(i);
  order_ = std::move(order);
  return true;
}

ShardedUnit* UnitSchedule::unit_at(int index, bool backward) const {
  const int n = static_cast<int>(order_.size());
  if (backward) {
    while (index >= 0 && index < n && order_[static_cast<size_t>(index)]->pass.idle) --index;
  }
  return index >= 0 && index < n ? order_[static_cast<size_t>(index)] : nullptr;
}

void UnitSchedule::prefetch(int index, bool backward) {
  if (recording_) return;
  ShardedUnit* next = unit_at(index, backward);
  if (next == nullptr || next->unsharded() || next->gather_in_flight() || inflight() >= limit_) return;
  next->unshard();
}

ShardedUnit* UnitSchedule::next_after(const ShardedUnit& u, bool backward) const {
  if (recording_ || u.forward_index < 0) return nullptr;
  return unit_at(backward ? u.forward_index - 1 : u.forward_index + 1, backward);
}

int UnitSchedule::inflight() const {
  int n = 0;
  for (const auto& u : units_) n += u->gather_in_flight() ? 1 : 0;
  return n;
}

}  // namespace zeroshard::detail
