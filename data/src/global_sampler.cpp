// SPDX-License-Identifier: Apache-2.0
// Samples per step as a position in one world-size-independent order (global_sampler.h).

#include "zeroshard/data/global_sampler.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/data/permutation.h"

namespace zeroshard::data {

GlobalSampler::GlobalSampler(GlobalSamplerOptions options) : options_(options) {
  ZS_REQUIRE(options.global_batch >= 1, UsageError, "GlobalSampler: the global batch (", options.global_batch,
             ") must be at least 1");
  ZS_REQUIRE(options.num_samples >= options.global_batch, UsageError, "GlobalSampler: ", options.num_samples,
             " samples hold no full global batch of ", options.global_batch);
}

// One permutation per epoch, keyed by the seed and the epoch.
uint64_t GlobalSampler::epoch_key(int64_t epoch) const {
  return splitmix64(options_.seed) ^ splitmix64(static_cast<uint64_t>(epoch) + 0x5EEDull);
}

int64_t GlobalSampler::sample_at(int64_t epoch, int64_t position) const {
  if (!options_.shuffle) return position;
  return IndexPermutation(options_.num_samples, epoch_key(epoch))(position);
}

SamplerState GlobalSampler::normalized() const {
  SamplerState s = state_;
  if (s.consumed + options_.global_batch > options_.num_samples) s = {s.epoch + 1, 0};
  return s;
}

std::vector<int64_t> GlobalSampler::peek_step(int rank, int world_size) const {
  ZS_REQUIRE(world_size >= 1 && rank >= 0 && rank < world_size, UsageError, "GlobalSampler: rank ", rank,
             " is outside [0, ", world_size, ")");
  const int64_t g = options_.global_batch;
  ZS_REQUIRE(g % world_size == 0, UsageError, "the global batch of ", g, " samples does not split evenly over ",
             world_size, " ranks; use a global batch that is a multiple of the world size (e.g. ",
             (g / world_size + 1) * world_size, ")");
  const SamplerState s = normalized();
  const int64_t per_rank = g / world_size;
  const int64_t first = s.consumed + rank * per_rank;
  std::vector<int64_t> ids(static_cast<size_t>(per_rank));
  if (!options_.shuffle) {
    for (int64_t i = 0; i < per_rank; ++i) ids[static_cast<size_t>(i)] = first + i;
    return ids;
  }
  const IndexPermutation order(options_.num_samples, epoch_key(s.epoch));
  for (int64_t i = 0; i < per_rank; ++i) ids[static_cast<size_t>(i)] = order(first + i);
  return ids;
}

std::vector<int64_t> GlobalSampler::next_step(int rank, int world_size) {
  std::vector<int64_t> ids = peek_step(rank, world_size);
  state_ = normalized();
  state_.consumed += options_.global_batch;
  return ids;
}

void GlobalSampler::restore(const SamplerState& state) {
  ZS_REQUIRE(state.epoch >= 0 && state.consumed >= 0 && state.consumed <= options_.num_samples, UsageError,
             "GlobalSampler: state (epoch ", state.epoch, ", consumed ", state.consumed, ") is outside an epoch of ",
             options_.num_samples, " samples");
  state_ = state;
}

using Json = nlohmann::ordered_json;

std::string GlobalSampler::state_json() const {
  Json o;
  o["epoch"] = state_.epoch;
  o["consumed"] = state_.consumed;
  o["num_samples"] = options_.num_samples;
  o["seed"] = std::to_string(options_.seed);  // a string: JSON numbers lose 64-bit integers
  o["shuffle"] = options_.shuffle;
  return o.dump();
}

namespace {

// The member `key` of `v`, which must be a JSON `type` ("number", "string", "boolean").
const Json& member(const Json& v, const char* key, const char* type) {
  const auto m = v.find(key);
  ZS_REQUIRE(m != v.end(), CheckpointError, "data sampler state has no \"", key, "\"");
  ZS_REQUIRE(std::string(m->type_name()) == type, CheckpointError, "data sampler state: \"", key, "\" is a ",
             m->type_name(), ", expected a ", type);
  return *m;
}

int64_t integer(const Json& v, const char* key) {
  const double d = member(v, key, "number").get<double>();
  ZS_REQUIRE(d >= 0 && d < 9.0e15 && std::floor(d) == d, CheckpointError, "data sampler state: \"", key, "\" = ", d,
             " is not a whole number >= 0");
  return static_cast<int64_t>(d);
}

}  // namespace

void GlobalSampler::restore_json(const std::string& json) {
  Json v;
  try {
    v = Json::parse(json);
  } catch (const Json::parse_error& e) {
    ZS_THROW(CheckpointError, "data sampler state: column ", e.byte, ": ", json_error_reason(e.what()));
  } catch (const Json::exception& e) {  // a number out of range ("1e999")
    ZS_THROW(CheckpointError, "data sampler state: ", json_error_reason(e.what()));
  }
  ZS_REQUIRE(v.is_object(), CheckpointError, "data sampler state is a ", v.type_name(), ", expected an object");
  const int64_t n = integer(v, "num_samples");
  ZS_REQUIRE(n == options_.num_samples, CheckpointError, "data sampler state: the checkpoint's data has ", n,
             " samples, this run's has ", options_.num_samples,
             " (another corpus, sequence length or packing): the run cannot resume at the same sample");
  const std::string seed = member(v, "seed", "string").get<std::string>();
  ZS_REQUIRE(seed == std::to_string(options_.seed), CheckpointError, "data sampler state: the checkpoint's seed is ",
             seed, ", this run's is ", options_.seed, ": the sample order would differ");
  const bool shuffle = member(v, "shuffle", "boolean").get<bool>();
  ZS_REQUIRE(shuffle == options_.shuffle, CheckpointError, "data sampler state: the checkpoint ",
             shuffle ? "shuffles" : "does not shuffle", " the samples, this run ",
             options_.shuffle ? "does" : "does not");
  SamplerState s{integer(v, "epoch"), integer(v, "consumed")};
  ZS_REQUIRE(s.consumed <= n, CheckpointError, "data sampler state: consumed = ", s.consumed, " exceeds the ", n,
             " samples of an epoch");
  state_ = s;
}

}  // namespace zeroshard::data
