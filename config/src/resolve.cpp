// SPDX-License-Identifier: Apache-2.0
// resolve(): the whole config to RunOptions, one function per section. The only reader of config
// fields besides validation (config.cpp, config_rules.cpp): a new key is read here and nowhere else.
// Enums map by name, explicitly (a schema value added without a mapping fails the switch's
// -Wswitch warning, never a silent cast).

#include "zeroshard/config/resolve.h"

#include <ATen/Context.h>

#include <string>
#include <vector>

#include "schema_text.h"
#include "zeroshard/adapt/nf4.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard {
namespace {

namespace opt = ::zeroshard::config;

// "a, b ,,c" -> {"a", "b", "c"}: blanks around items and empty items dropped.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

c10::ScalarType dtype_of(opt::PrecisionConfig::DType d) {
  switch (d) {
    case opt::PrecisionConfig::FP32: return c10::kFloat;
    case opt::PrecisionConfig::BF16: return c10::kBFloat16;
    case opt::PrecisionConfig::FP16: return c10::kHalf;
  }
  return c10::kFloat;
}

OffloadTarget target_of(opt::OffloadConfig::Target t) {
  switch (t) {
    case opt::OffloadConfig::DEVICE: return OffloadTarget::kDevice;
    case opt::OffloadConfig::CPU: return OffloadTarget::kCpu;
    case opt::OffloadConfig::NVME: return OffloadTarget::kNvme;
  }
  return OffloadTarget::kDevice;
}

IoBackend io_backend_of(opt::OffloadConfig::IoBackend b) {
  switch (b) {
    case opt::OffloadConfig::AUTO: return IoBackend::kAuto;
    case opt::OffloadConfig::IO_URING: return IoBackend::kIoUring;
    case opt::OffloadConfig::LIBAIO: return IoBackend::kLibaio;
    case opt::OffloadConfig::THREADS: return IoBackend::kThreads;
  }
  return IoBackend::kAuto;
}

SessionOptions session_options(const Config& c) {
  SessionOptions o;
  switch (c.runtime().device()) {
    case opt::RuntimeConfig::AUTO: o.device = DevicePolicy::kAuto; break;
    case opt::RuntimeConfig::CPU: o.device = DevicePolicy::kCpu; break;
    case opt::RuntimeConfig::CUDA: o.device = DevicePolicy::kCuda; break;
  }
  o.seed = c.runtime().seed();
  o.comm.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.comm().timeout_s() * 1000.0));
  o.comm.abort_on_timeout = c.comm().abort_on_timeout();
  o.comm.check_signatures = c.comm().check_signatures();
  o.comm.reduce_scatter_ring = c.comm().reduce_scatter_ring();
  o.comm.node_stages = c.comm().node_stages();
  o.flight_recorder_entries = c.comm().flight_recorder_entries();
  o.flight_recorder_dir = c.comm().flight_recorder_dir();
  switch (c.comm().backend()) {
    case opt::CommConfig::AUTO: o.comm_backend = CommBackend::kAuto; break;
    case opt::CommConfig::MPI: o.comm_backend = CommBackend::kMpi; break;
    case opt::CommConfig::NCCL: o.comm_backend = CommBackend::kNccl; break;
  }
  o.log.level = parse_log_level(c.logging().level(), "logging.level");
  o.log = parse_log_ranks(c.logging().ranks(), o.log, "logging.ranks");
  const auto& m = c.memory();
  o.memory.limit_mib = m.limit_mib();
  o.memory.track_allocations = m.track_allocations();
  o.memory.snapshot_dir = m.snapshot_dir();
  o.memory.top_allocations = m.top_allocations();
  o.memory.host_cache_mib = m.host_cache_mib();
  o.memory.host_cache_grows = !m.has_host_cache_mib();
  o.memory.limit_source = "memory.limit_mib = " + std::to_string(m.limit_mib());
  return o;
}

// offload.params or offload.grads: where those shards live, and the I/O keys they share.
StoreOptions store_options(const opt::OffloadConfig& off, opt::OffloadConfig::Target target) {
  StoreOptions s;
  s.target = target_of(target);
  s.nvme_path = off.nvme_path();
  s.pin_memory = off.pin_memory();
  s.block_size = off.block_size();
  s.queue_depth = off.queue_depth();
  s.io_backend = io_backend_of(off.io_backend());
  return s;
}

void set_strategy(const opt::ShardingConfig& s, ShardingOptions* o) {
  switch (s.strategy()) {
    case opt::ShardingConfig::FULL_SHARD: o->strategy = ShardingStrategy::kFullShard; break;
    case opt::ShardingConfig::SHARD_GRAD_OP: o->strategy = ShardingStrategy::kShardGradOp; break;
    case opt::ShardingConfig::NO_SHARD: o->strategy = ShardingStrategy::kNoShard; break;
    case opt::ShardingConfig::HYBRID_SHARD: o->strategy = ShardingStrategy::kHybridShard; break;
  }
  switch (s.backward_prefetch()) {
    case opt::BackwardPrefetch::NONE: o->backward_prefetch = BackwardPrefetch::kNone; break;
    case opt::BackwardPrefetch::BACKWARD_PRE: o->backward_prefetch = BackwardPrefetch::kBackwardPre; break;
    case opt::BackwardPrefetch::BACKWARD_POST: o->backward_prefetch = BackwardPrefetch::kBackwardPost; break;
  }
  switch (s.auto_wrap_policy()) {
    case opt::AutoWrap::NONE: o->auto_wrap_policy = AutoWrapPolicy::kNone; break;
    case opt::AutoWrap::SIZE_BASED: o->auto_wrap_policy = AutoWrapPolicy::kSizeBased; break;
    case opt::AutoWrap::MODULE_TYPE: o->auto_wrap_policy = AutoWrapPolicy::kModuleType; break;
  }
  switch (s.buffer_sync()) {
    case opt::BufferSync::AVERAGE: o->buffer_sync = BufferSync::kAverage; break;
    case opt::BufferSync::BROADCAST: o->buffer_sync = BufferSync::kBroadcast; break;
    case opt::BufferSync::NONE: o->buffer_sync = BufferSync::kNone; break;
  }
  o->gather_quant_block = s.gather_quantization() == opt::GatherQuantization::INT8 ? s.gather_quantization_block() : 0;
  o->reduce_quant_block = s.reduce_quantization() == opt::ReduceQuantization::INT8 ? s.reduce_quantization_block() : 0;
}

// precision.*: with autocast, param_dtype names the autocast dtype and the parameters stay fp32.
void set_precision(const opt::PrecisionConfig& p, ShardingOptions* o) {
  o->param_dtype = dtype_of(p.param_dtype());
  if (p.autocast()) {
    o->autocast = true;
    o->autocast_dtype = o->param_dtype;
    o->param_dtype = c10::kFloat;
  }
  o->reduce_dtype = dtype_of(p.reduce_dtype());
  o->buffer_dtype = dtype_of(p.buffer_dtype());
  o->output_dtype = dtype_of(p.output_dtype());
  o->cast_forward_inputs = p.cast_forward_inputs();
}

lora::Options lora_options(const Config& c) {
  lora::Options o;
  o.rank = c.lora().rank();
  o.alpha = c.lora().alpha();
  o.dropout = c.lora().dropout();
  o.targets = split_list(c.lora().targets());
  return o;
}

ShardingOptions sharding_options(const Config& c) {
  ShardingOptions o;
  const auto& s = c.sharding();
  set_strategy(s, &o);
  o.hybrid_group_size = s.hybrid_group_size();
  o.hpz_group_size = s.hpz_group_size();
  o.forward_prefetch = s.forward_prefetch();
  o.limit_all_gathers = s.limit_all_gathers();
  o.sync_module_states = s.sync_module_states();
  o.auto_wrap_min_params = s.auto_wrap_min_params();
  o.auto_wrap_module_types = split_list(s.auto_wrap_module_types());
  set_precision(c.precision(), &o);
  o.offload_params = store_options(c.offload(), c.offload().params());
  // With the optimizer's state on NVMe too, the parameter store keeps the fp32 master for it, in as
  // many generations as the state (on a CPU run; a GPU run's optimizer keeps its own master).
  if (c.offload().optimizer() == opt::OffloadConfig::NVME) {
    o.offload_params.generations = c.offload().nvme_generations();
  }
  o.offload_grads = store_options(c.offload(), c.offload().grads());
  o.keep_param_dtype_shard = c.offload().keep_param_dtype_shard();
  // The adapters, in this order: NF4 storage of the frozen Linear weights, then LoRA (whose hook
  // freezes the base as each unit is built).
  if (c.precision().frozen_linear() == opt::PrecisionConfig::NF4) o.unit_hooks.push_back(nf4::frozen_linear_hook());
  if (c.lora().rank() > 0) o.unit_hooks.push_back(lora::unit_hook(lora_options(c)));
  return o;
}

OptimizerOptions optimizer_options(const Config& c) {
  const auto& cfg = c.optimizer();
  OptimizerOptions o;
  switch (cfg.type()) {
    case opt::OptimizerConfig::ADAM: o.type = OptimizerOptions::Type::kAdam; break;
    case opt::OptimizerConfig::ADAMW: o.type = OptimizerOptions::Type::kAdamW; break;
    case opt::OptimizerConfig::SGD: o.type = OptimizerOptions::Type::kSgd; break;
  }
  o.lr = cfg.lr();
  o.beta1 = cfg.beta1();
  o.beta2 = cfg.beta2();
  o.eps = cfg.eps();
  o.weight_decay = cfg.weight_decay();
  o.momentum = cfg.momentum();
  o.nesterov = cfg.nesterov();
  return o;
}

ParamGroupOptions param_group_options(const Config& c) {
  ParamGroupOptions o;
  o.weight_decay = c.optimizer().weight_decay();
  o.no_decay_1d_and_embeddings = c.optimizer().no_decay_1d_and_embeddings();
  for (int i = 0; i < c.optimizer().param_groups_size(); ++i) {
    const auto& g = c.optimizer().param_groups(i);
    ParamGroupRule r;
    r.match = g.match();
    if (g.has_weight_decay()) r.weight_decay = g.weight_decay();
    r.lr_scale = g.lr_scale();
    r.label = "optimizer.param_groups[" + std::to_string(i) + "]";
    o.rules.push_back(std::move(r));
  }
  return o;
}

LrScheduleOptions scheduler_options(const Config& c) {
  const auto& s = c.scheduler();
  LrScheduleOptions o;
  switch (s.type()) {
    case opt::SchedulerConfig::CONSTANT: o.type = LrScheduleOptions::Type::kConstant; break;
    case opt::SchedulerConfig::LINEAR_WARMUP: o.type = LrScheduleOptions::Type::kLinearWarmup; break;
    case opt::SchedulerConfig::COSINE: o.type = LrScheduleOptions::Type::kCosine; break;
    case opt::SchedulerConfig::STEP: o.type = LrScheduleOptions::Type::kStep; break;
  }
  o.warmup_steps = s.warmup_steps();
  o.total_steps = s.total_steps();
  o.min_lr_ratio = s.min_lr_ratio();
  o.step_size = s.step_size();
  o.gamma = s.gamma();
  return o;
}

LossScaleOptions loss_scale_options(const Config& c) {
  const auto& s = c.precision().loss_scale();
  LossScaleOptions o;
  switch (s.mode()) {
    case opt::LossScaleConfig::AUTO: o.mode = LossScaleMode::kAuto; break;
    case opt::LossScaleConfig::DYNAMIC: o.mode = LossScaleMode::kDynamic; break;
    case opt::LossScaleConfig::STATIC: o.mode = LossScaleMode::kStatic; break;
    case opt::LossScaleConfig::DISABLED: o.mode = LossScaleMode::kDisabled; break;
  }
  o.initial_scale = s.initial_scale();
  o.growth_factor = s.growth_factor();
  o.backoff_factor = s.backoff_factor();
  o.growth_interval = s.growth_interval();
  o.hysteresis = s.hysteresis();
  o.min_scale = s.min_scale();
  return o;
}

OffloadOptions offload_options(const Config& c) {
  const auto& off = c.offload();
  OffloadOptions o;
  o.target = target_of(off.optimizer());
  o.params = target_of(off.params());
  o.nvme_path = off.nvme_path();
  o.pin_memory = off.pin_memory();
  o.block_size = off.block_size();
  o.queue_depth = off.queue_depth();
  o.buffer_count = off.buffer_count();
  o.nvme_generations = off.nvme_generations();
  o.io_backend = io_backend_of(off.io_backend());
  o.overlap_step = off.overlap_step();
  return o;
}

CheckpointOptions checkpoint_options(const Config& c) {
  CheckpointOptions o;
  o.dir = c.checkpoint().dir();
  o.keep_last = c.checkpoint().keep_last();
  o.async_save = c.checkpoint().async_save();
  return o;
}

// model.init_*; the rename pairs were checked by validation (config_rules.cpp).
PretrainedOptions pretrained_options(const Config& c) {
  const auto& m = c.model();
  PretrainedOptions o;
  o.strict = m.init_strict();
  o.strip_prefix = m.init_strip_prefix();
  o.add_prefix = m.init_add_prefix();
  for (const std::string& pair : split_list(m.init_rename())) {
    const size_t eq = pair.find('=');
    o.rename[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  // LoRA adapters start fresh over pretrained base weights.
  if (c.lora().rank() > 0) o.not_required = {"*lora_A", "*lora_B"};
  return o;
}

EstimateOptions estimate_options(const Config& c, const RunOptions& run) {
  EstimateOptions o;
  o.sharding = run.sharding;
  o.optimizer = to_string(run.optimizer.type);
  const bool sgd = run.optimizer.type == OptimizerOptions::Type::kSgd;
  o.optimizer_state_bytes = sgd ? (run.optimizer.momentum > 0 ? 4 : 0) : 8;
  o.offload_optimizer = run.offload.target;
  o.offload_params = run.sharding.offload_params.target;
  o.offload_grads = run.sharding.offload_grads.target;
  o.keep_param_dtype_shard = run.sharding.keep_param_dtype_shard;
  o.offload_buffer_count = c.offload().buffer_count();
  o.offload_block_size = c.offload().block_size();
  o.nvme_generations = c.offload().nvme_generations();
  o.gpu = run.session.device == DevicePolicy::kCuda || (run.session.device == DevicePolicy::kAuto && at::hasCUDA());
  o.node_stages = run.session.comm.node_stages;
  o.reduce_scatter_ring = run.session.comm.reduce_scatter_ring;
  return o;
}

models::GptOptions model_options(const Config& c) {
  const auto& m = c.model();
  models::GptOptions o;
  o.vocab_size = m.vocab_size();
  o.d_model = m.d_model();
  o.n_head = m.n_head();
  o.n_layer = m.n_layer();
  o.seq_len = m.seq_len();
  o.mlp_ratio = m.mlp_ratio();
  o.dropout = m.dropout();
  o.checkpointing.enabled = c.activation_checkpointing().enabled();
  o.checkpointing.every_n_blocks = c.activation_checkpointing().every_n_blocks();
  return o;
}

TrainOptions train_options(const Config& c) {
  TrainOptions o;
  const auto& t = c.train();
  o.steps = t.steps();
  o.epochs = t.epochs();
  o.batch_size = t.batch_size();
  o.micro_batches = t.micro_batches();
  o.no_sync = t.no_sync();
  o.eval_interval = t.eval_interval();
  o.eval_batches = t.eval_batches();
  o.log_interval = t.log_interval();
  o.stop_deadline_s = t.stop_deadline_s();
  o.grad_clip_norm = c.optimizer().grad_clip_norm();
  o.checkpoint_interval = c.checkpoint().interval_steps();
  const auto& d = c.data();
  o.num_workers = d.num_workers();
  o.prefetch_batches = d.prefetch_batches();
  o.pin_memory = d.pin_memory();
  o.shuffle = d.shuffle();
  o.limit_train_samples = d.limit_train_samples();
  o.limit_eval_samples = d.limit_eval_samples();
  o.seed = c.runtime().seed();
  return o;
}


ModelSource model_source(const Config& c) {
  return ModelSource{c.model().path(), split_list(c.model().units()), split_list(c.model().unit_types())};
}

SampleOptions sample_options(const Config& c) {
  const auto& s = c.sample();
  return SampleOptions{s.tokens(), s.temperature(), s.top_k(), s.prompt(), s.seed()};
}

ProgressSettings progress_settings(const Config& c) {
  ProgressSettings o;
  switch (c.logging().progress()) {
    case opt::LoggingConfig::AUTO: o.style = ProgressStyle::kAuto; break;
    case opt::LoggingConfig::BAR: o.style = ProgressStyle::kBar; break;
    case opt::LoggingConfig::LINES: o.style = ProgressStyle::kLines; break;
  }
  o.tensorboard_dir = c.logging().tensorboard_dir();
  return o;
}

}  // namespace

DataOptions resolve_data(const Config& c) {
  DataOptions o{c.data().path(), c.data().val_fraction()};
  switch (c.data().format()) {
    case opt::DataConfig::AUTO: o.format = DataFormat::kAuto; break;
    case opt::DataConfig::BYTES: o.format = DataFormat::kBytes; break;
    case opt::DataConfig::TOKEN_SHARDS: o.format = DataFormat::kTokenShards; break;
    case opt::DataConfig::JSONL: o.format = DataFormat::kJsonl; break;
    case opt::DataConfig::IMAGES: o.format = DataFormat::kImages; break;
  }
  return o;
}

RunOptions resolve(const Config& validated) {
  const std::vector<ConfigProblem> problems = check_config(validated);
  ZS_REQUIRE(problems.empty(), UsageError, "resolve() needs a validated config (build_config or validate_config): ",
             schema_text::format_problems(problems, [](const ConfigProblem&) { return ""; }));
  RunOptions r;
  r.session = session_options(validated);
  r.sharding = sharding_options(validated);
  r.optimizer = optimizer_options(validated);
  r.param_groups = param_group_options(validated);
  r.scheduler = scheduler_options(validated);
  r.loss_scale = loss_scale_options(validated);
  const auto& p = validated.precision();
  r.fp16 = p.param_dtype() == opt::PrecisionConfig::FP16 || p.reduce_dtype() == opt::PrecisionConfig::FP16;
  r.offload = offload_options(validated);
  r.checkpoint = checkpoint_options(validated);
  r.init_from = validated.model().init_from();
  r.pretrained = pretrained_options(validated);
  r.lora = lora_options(validated);
  r.estimate = estimate_options(validated, r);
  r.model = model_options(validated);
  r.train = train_options(validated);
  r.data = resolve_data(validated);
  r.model_source = model_source(validated);
  r.sample = sample_options(validated);
  r.progress = progress_settings(validated);
  return r;
}

}  // namespace zeroshard
