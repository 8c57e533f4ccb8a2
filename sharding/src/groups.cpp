#include "groups.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <cstring>
#include <functional>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/sharding/plan.h"

namespace zeroshard::detail {

ShardGroups make_shard_groups(Session& session, const ShardingOptions& options, bool on_cuda) {
  ShardGroups g;
  g.comm = on_cuda ? session.device_world() : session.world();
  const int n = g.comm->size(), r = g.comm->rank();
  if (n == 1) {
    g.shard_group = g.comm;
    return g;
  }
  const ShardingPlan plan = plan_sharding(options.strategy, options.hybrid_group_size, n, session.local_world_size());
  // Splits are collective over all ranks, and every rank computes the same plan: the same splits.
  g.shard_group = plan.shard_group_size == n ? g.comm : g.comm->split(plan.shard_group_color(r), r);
  if (plan.replicas == n) {
    g.replicate_group = g.comm;
  } else if (plan.replicas > 1) {
    g.replicate_group = g.comm->split(plan.replica_group_color(r), r);
  }
  return g;
}

std::string describe_slots(const std::vector<ParamSlot>& slots, bool trainable) {
  std::ostringstream os;
  for (const ParamSlot& s : slots) {
    os << "  parameter '" << s.name << "' shape " << at::IntArrayRef(s.shape) << " "
       << c10::toString(s.param.scalar_type()) << " " << s.param.device().type() << (trainable ? "" : " frozen")
       << "\n";
  }
  return os.str();
}

void check_same_description(Communicator& world, const std::string& mine, const std::string& what) {
  if (world.size() == 1) return;
  const int n = world.size();
  at::Tensor hashes = at::empty({n}, at::kLong);
  at::Tensor my_hash = at::full({1}, static_cast<int64_t>(std::hash<std::string>{}(mine) >> 1), at::kLong);
  world.all_gather_into(hashes, my_hash, "zs.structure_hash")->wait();
  std::vector<int> differ;
  for (int r = 1; r < n; ++r) {
    if (hashes[r].item<int64_t>() != hashes[0].item<int64_t>()) differ.push_back(r);
  }
  if (differ.empty()) return;
  // Name the first difference: rank 0 sends its description to everyone.
  at::Tensor len = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  world.broadcast(len, 0, "zs.structure_len")->wait();
  at::Tensor text = at::empty({len.item<int64_t>()}, at::kByte);
  if (world.rank() == 0) std::memcpy(text.data_ptr(), mine.data(), mine.size());
  world.broadcast(text, 0, "zs.structure_text")->wait();
  std::string theirs(static_cast<const char*>(text.data_ptr()), text.numel());
  std::istringstream a(theirs), b(mine);
  std::string la, lb, unit_a;
  std::ostringstream ranks;
  for (size_t i = 0; i < differ.size(); ++i) ranks << (i ? ", " : "") << differ[i];
  while (true) {
    bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    if (ga && la.rfind("unit", 0) == 0) unit_a = la;
    if (!ga || !gb || la != lb) {
      ZS_THROW(UsageError, "ranks build different ", what, " (ranks differing from rank 0: ", ranks.str(),
               "). First difference on this rank, in ", unit_a.empty() ? std::string("the unit list") : unit_a,
               ": rank 0 has '", ga ? la : std::string("<nothing>"), "' but this rank has '",
               gb ? lb : std::string("<nothing>"), "'. Build the same model on every rank (same config, no "
               "rank-dependent modules) before wrapping it.");
    }
  }
  ZS_THROW(UsageError, "ranks build different ", what, ": ranks ", ranks.str(),
           " differ from rank 0 (their error messages name the first difference)");
}

}  // namespace zeroshard::detail
