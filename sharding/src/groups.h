#pragma once
// The communicators a sharding strategy needs: all ranks, the shard group, the replica group.

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/core/session.h"
#include "zeroshard/sharding/engine.h"
#include "zeroshard/sharding/flat_param.h"

namespace zeroshard::detail {

struct ShardGroups {
  std::shared_ptr<Communicator> comm;             // all ranks, for the parameters' device
  std::shared_ptr<Communicator> shard_group;
  std::shared_ptr<Communicator> replicate_group;  // null when not replicated
  // The same groups over the host communicator (CPU tensors, MPI): the device groups themselves
  // on CPU. For small checks that must not wait for the device's queue.
  std::shared_ptr<Communicator> host_shard_group;
  std::shared_ptr<Communicator> host_replicate_group;  // null when not replicated
};

// Collective over all ranks (splits communicators). Throws ConfigError for a hybrid group size
// that does not divide the world.
ShardGroups make_shard_groups(Session& session, const ShardingOptions& options, bool on_cuda);

// One line per parameter: name, shape, dtype, device type, frozen flag.
std::string describe_slots(const std::vector<ParamSlot>& slots, bool trainable);

// Collective over `world`: compares every rank's description of `what` (a hash, then rank 0's
// text when they differ) and throws UsageError on every rank if any differs; the differing ranks
// name their first differing line and rank 0's.
void check_same_description(Communicator& world, const std::string& mine, const std::string& what);

}  // namespace zeroshard::detail
