#include "groups.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <cstring>
#include <functional>
#include <sstream>

#include "zeroshard/core/error.h"

namespace zeroshard::detail {

ShardGroups make_shard_groups(Session& session, const ShardingOptions& options, bool on_cuda) {
  ShardGroups g;
  auto& comm = g.comm;
  auto& shard_group = g.shard_group;
  auto& replicate_group = g.replicate_group;
  comm = on_cuda ? session.device_world() : session.world();
  const int n = comm->size(), r = comm->rank();
  using S = config::ShardingConfig;
  if (n == 1) {
    shard_group = comm;
    return g;
  }
  switch (options.strategy) {
    case S::FULL_SHARD:
    case S::SHARD_GRAD_OP:
      shard_group = comm;
      break;
    case S::NO_SHARD:
      shard_group = comm->split(r, 0);
      replicate_group = comm;
      break;
    case S::HYBRID_SHARD: {
      const int g = options.hybrid_group_size > 0 ? options.hybrid_group_size : session.local_world_size();
      ZS_REQUIRE(n % g == 0, ConfigError, "sharding.hybrid_group_size = ", g, " does not divide the world size ", n,
                 "; allowed: a divisor of ", n, " (0 means the ranks of one node, here ", session.local_world_size(),
                 ")");
      shard_group = comm->split(r / g, r);
      replicate_group = comm->split(r % g, r);
      break;
    }
    default:
      ZS_THROW(ConfigError, "sharding.strategy has an unknown value ", static_cast<int>(options.strategy));
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
