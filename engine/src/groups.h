// SPDX-License-Identifier: Apache-2.0
#pragma once
// The communicators a sharding strategy needs: all ranks, the shard group, the replica group.

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"

namespace zeroshard::detail {

struct ShardGroups {
  std::shared_ptr<Communicator> comm;             // all ranks, for the parameters' device
  std::shared_ptr<Communicator> shard_group;
  std::shared_ptr<Communicator> replicate_group;  // null when not replicated
  // hpZ: this rank's secondary group, a split of shard_group (null without hpZ).
  std::shared_ptr<Communicator> secondary_group;
  // The same groups over the host communicator (CPU tensors, MPI): the device groups themselves
  // on CPU. For small checks that must not wait for the device's queue.
  std::shared_ptr<Communicator> host_shard_group;
  std::shared_ptr<Communicator> host_replicate_group;  // null when not replicated
};

// Collective over all ranks (splits communicators). Throws ConfigError for a hybrid group size
// that does not divide the world, and for hpZ groups the job cannot make (plan_secondary_groups)
// or with offloaded parameters.
ShardGroups make_shard_groups(Session& session, const ShardingOptions& options, bool on_cuda);

// One line per parameter of `f`: name, shape, dtype, device type, frozen flag (and "nf4" for an
// NF4 flat parameter).
std::string describe_flat(const FlatParam& f);

// A unit's parameters by the flat parameter they go to.
struct UnitSlots {
  std::vector<ParamSlot> trainable;
  std::vector<ParamSlot> frozen;
  // Frozen parameters a unit hook stores encoded, one list per codec, in the order first seen.
  std::vector<std::pair<std::shared_ptr<const ShardCodec>, std::vector<ParamSlot>>> encoded;
  bool empty() const { return trainable.empty() && frozen.empty() && encoded.empty(); }
  // The lists in flat order (trainable, frozen, encoded), the empty ones left out.
  std::vector<const std::vector<ParamSlot>*> lists() const;
};
// Adds `slot`, the parameter `key` of module `owner`, to its list: trainable; else encoded with
// the first codec a unit hook gives it (only when no other name shares the tensor); else frozen.
void sort_slot(UnitSlots& slots, ParamSlot slot, const torch::nn::Module& owner, const std::string& key,
               const ShardingOptions& options);
// The unit's flat parameters in the order trainable, frozen, encoded (the empty ones left out),
// named flat_name(unit, ...).
std::vector<std::unique_ptr<FlatParam>> make_unit_flats(const std::string& unit, UnitSlots slots,
                                                        const ShardGroups& groups, MemoryStats* mem,
                                                        const ShardingOptions& options);
std::string flat_name(const std::string& unit, bool trainable, const ShardCodec* codec);

// Collective over `world`: compares every rank's description of `what` (a hash, then rank 0's
// text when they differ) and throws UsageError on every rank if any differs; the differing ranks
// name their first differing line and rank 0's.
void check_same_description(Communicator& world, const std::string& mine, const std::string& what);

}  // namespace zeroshard::detail
