// The config edge of the sharding layer: ShardingOptions from the config's sections. The plain
// enums have the config enums' values in the same order (static_asserts below), so the conversion
// is a cast.

#include "zeroshard/engine/options.h"

#include "zeroshard/base/error.h"
#include "zeroshard/core/config.h"

namespace zeroshard {

using SC = config::ShardingConfig;
static_assert(static_cast<int>(ShardingStrategy::kFullShard) == SC::FULL_SHARD &&
              static_cast<int>(ShardingStrategy::kShardGradOp) == SC::SHARD_GRAD_OP &&
              static_cast<int>(ShardingStrategy::kNoShard) == SC::NO_SHARD &&
              static_cast<int>(ShardingStrategy::kHybridShard) == SC::HYBRID_SHARD);
static_assert(static_cast<int>(BackwardPrefetch::kNone) == config::BackwardPrefetch::NONE &&
              static_cast<int>(BackwardPrefetch::kBackwardPre) == config::BackwardPrefetch::BACKWARD_PRE &&
              static_cast<int>(BackwardPrefetch::kBackwardPost) == config::BackwardPrefetch::BACKWARD_POST);
static_assert(static_cast<int>(OffloadTarget::kDevice) == config::OffloadConfig::DEVICE &&
              static_cast<int>(OffloadTarget::kCpu) == config::OffloadConfig::CPU &&
              static_cast<int>(OffloadTarget::kNvme) == config::OffloadConfig::NVME);
static_assert(static_cast<int>(BufferSync::kAverage) == config::BufferSync::AVERAGE &&
              static_cast<int>(BufferSync::kBroadcast) == config::BufferSync::BROADCAST &&
              static_cast<int>(BufferSync::kNone) == config::BufferSync::NONE);
static_assert(static_cast<int>(AutoWrapPolicy::kNone) == config::AutoWrap::NONE &&
              static_cast<int>(AutoWrapPolicy::kSizeBased) == config::AutoWrap::SIZE_BASED &&
              static_cast<int>(AutoWrapPolicy::kModuleType) == config::AutoWrap::MODULE_TYPE);

const char* to_string(BufferSync b) {
  switch (b) {
    case BufferSync::kAverage: return "AVERAGE";
    case BufferSync::kBroadcast: return "BROADCAST";
    case BufferSync::kNone: return "NONE";
  }
  return "unknown buffer sync";
}

namespace {
// "torch::nn::Linear, GptBlock" -> {"torch::nn::Linear", "GptBlock"}; empty entries dropped.
std::vector<std::string> split_module_types(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}
}  // namespace

ShardingOptions ShardingOptions::from_config(const config::ShardingConfig& cfg) {
  ShardingOptions o;
  o.strategy = static_cast<ShardingStrategy>(cfg.strategy());
  o.hybrid_group_size = cfg.hybrid_group_size();
  o.forward_prefetch = cfg.forward_prefetch();
  o.backward_prefetch = static_cast<BackwardPrefetch>(cfg.backward_prefetch());
  o.limit_all_gathers = cfg.limit_all_gathers();
  o.sync_module_states = cfg.sync_module_states();
  o.auto_wrap_policy = static_cast<AutoWrapPolicy>(cfg.auto_wrap_policy());
  o.auto_wrap_min_params = cfg.auto_wrap_min_params();
  o.auto_wrap_module_types = split_module_types(cfg.auto_wrap_module_types());
  o.buffer_sync = static_cast<BufferSync>(cfg.buffer_sync());
  return o;
}

namespace {
c10::ScalarType to_dtype(config::PrecisionConfig::DType d) {
  switch (d) {
    case config::PrecisionConfig::BF16: return c10::kBFloat16;
    case config::PrecisionConfig::FP16: return c10::kHalf;
    default: return c10::kFloat;
  }
}
}  // namespace

ShardingOptions ShardingOptions::from_config(const config::ShardingConfig& cfg, const config::PrecisionConfig& p) {
  ShardingOptions o = from_config(cfg);
  o.param_dtype = to_dtype(p.param_dtype());
  if (p.autocast()) {
    ZS_REQUIRE(p.param_dtype() != config::PrecisionConfig::FP32, ConfigError,
               "precision.autocast = true needs precision.param_dtype = BF16 or FP16 (the autocast dtype; "
               "parameters stay fp32)");
    o.autocast = true;
    o.autocast_dtype = o.param_dtype;
    o.param_dtype = c10::kFloat;
  }
  o.reduce_dtype = to_dtype(p.reduce_dtype());
  o.buffer_dtype = to_dtype(p.buffer_dtype());
  o.output_dtype = to_dtype(p.output_dtype());
  o.cast_forward_inputs = p.cast_forward_inputs();
  return o;
}

ShardingOptions ShardingOptions::from_config(const config::Config& cfg) {
  ShardingOptions o = from_config(cfg.sharding(), cfg.precision());
  const config::OffloadConfig& off = cfg.offload();
  StoreOptions& p = o.offload_params;
  p.target = static_cast<OffloadTarget>(off.params());
  p.nvme_path = off.nvme_path();
  p.pin_memory = off.pin_memory();
  p.block_size = off.block_size();
  p.queue_depth = off.queue_depth();
  switch (off.io_backend()) {
    case config::OffloadConfig::IO_URING: p.io_backend = IoBackend::kIoUring; break;
    case config::OffloadConfig::LIBAIO: p.io_backend = IoBackend::kLibaio; break;
    case config::OffloadConfig::THREADS: p.io_backend = IoBackend::kThreads; break;
    default: p.io_backend = IoBackend::kAuto; break;
  }
  ZS_REQUIRE(p.target == OffloadTarget::kDevice || off.optimizer() != config::OffloadConfig::DEVICE, ConfigError,
             "offload.params = ", to_string(p.target),
             " needs offload.optimizer = CPU or NVME: the fp32 master and the moments live with the offloaded "
             "optimizer, whose step streams the parameter shards one at a time");
  ZS_REQUIRE(p.target != OffloadTarget::kNvme || !p.nvme_path.empty(), ConfigError,
             "offload.params = NVME needs offload.nvme_path (a directory on the NVMe drive)");
  o.keep_param_dtype_shard = off.keep_param_dtype_shard();
  ZS_REQUIRE(!o.keep_param_dtype_shard || (p.target != OffloadTarget::kDevice && o.param_dtype != c10::kFloat),
             ConfigError,
             "offload.keep_param_dtype_shard = true needs offload.params = CPU or NVME and precision.param_dtype = "
             "BF16 or FP16 without precision.autocast (got offload.params = ",
             to_string(p.target), ", compute dtype ", c10::toString(o.param_dtype), ")");
  StoreOptions& g = o.offload_grads;
  g = p;
  g.target = static_cast<OffloadTarget>(off.grads());
  ZS_REQUIRE(g.target == OffloadTarget::kDevice || off.optimizer() != config::OffloadConfig::DEVICE, ConfigError,
             "offload.grads = ", to_string(g.target),
             " needs offload.optimizer = CPU or NVME: the offloaded optimizer's step brings each gradient shard in "
             "with its parameters");
  ZS_REQUIRE(g.target != OffloadTarget::kNvme || !g.nvme_path.empty(), ConfigError,
             "offload.grads = NVME needs offload.nvme_path (a directory on the NVMe drive)");
  return o;
}

}  // namespace zeroshard
