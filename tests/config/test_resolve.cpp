// SPDX-License-Identifier: Apache-2.0
// resolve(): the whole config to RunOptions. Every struct's defaults equal what the default config
// resolves to (field by field: a field given two defaults fails here), every section maps each
// key, the unit hooks follow precision.frozen_linear and lora.rank; and load_run refuses a key a
// program does not act on, naming the key, where it was set and what the program reads.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/config/resolve.h"

namespace zeroshard {
namespace {

Config with(const std::vector<std::string>& sets) {
  Config c;
  for (const std::string& s : sets) apply_override(c, s);
  validate_config(c);
  return c;
}

TEST(Resolve, SessionDefaultsAreTheSchemas) {
  const SessionOptions d, r = resolve(Config()).session;
  EXPECT_EQ(d.device, r.device);
  EXPECT_EQ(d.seed, r.seed);
  EXPECT_EQ(d.comm.timeout, r.comm.timeout);
  EXPECT_EQ(d.comm.abort_on_timeout, r.comm.abort_on_timeout);
  EXPECT_EQ(d.comm.check_signatures, r.comm.check_signatures);
  EXPECT_EQ(d.comm.reduce_scatter_ring, r.comm.reduce_scatter_ring);
  EXPECT_EQ(d.comm.node_stages, r.comm.node_stages);
  EXPECT_EQ(d.comm_backend, r.comm_backend);
  EXPECT_EQ(d.log.level, r.log.level);
  EXPECT_EQ(d.log.all_ranks, r.log.all_ranks);
  EXPECT_EQ(d.log.ranks, r.log.ranks);
  EXPECT_EQ(d.memory.limit_mib, r.memory.limit_mib);
  EXPECT_EQ(d.memory.track_allocations, r.memory.track_allocations);
  EXPECT_EQ(d.memory.snapshot_dir, r.memory.snapshot_dir);
  EXPECT_EQ(d.memory.top_allocations, r.memory.top_allocations);
  EXPECT_EQ(d.memory.host_cache_mib, r.memory.host_cache_mib);
  EXPECT_EQ(d.memory.host_cache_grows, r.memory.host_cache_grows);
  EXPECT_TRUE(r.memory.host_cache_grows) << "unset, the engine may raise the cache";
  EXPECT_EQ(r.memory.limit_source, "memory.limit_mib = 0") << "the report names the config key";
}

// memory.host_cache_mib set in the config is the cache's size: the engine leaves it alone, the
// default 256 included.
TEST(Resolve, AHostCacheSizeSetInTheConfigIsKept) {
  for (int64_t mib : {int64_t{0}, int64_t{256}, int64_t{4096}}) {
    Config c;
    c.mutable_memory()->set_host_cache_mib(mib);
    const SessionOptions r = resolve(c).session;
    EXPECT_EQ(r.memory.host_cache_mib, mib);
    EXPECT_FALSE(r.memory.host_cache_grows) << mib;
  }
}

TEST(Resolve, ShardingDefaultsAreTheSchemas) {
  const ShardingOptions d, r = resolve(Config()).sharding;
  EXPECT_EQ(d.strategy, r.strategy);
  EXPECT_EQ(d.hybrid_group_size, r.hybrid_group_size);
  EXPECT_EQ(d.forward_prefetch, r.forward_prefetch);
  EXPECT_EQ(d.backward_prefetch, r.backward_prefetch);
  EXPECT_EQ(d.limit_all_gathers, r.limit_all_gathers);
  EXPECT_EQ(d.sync_module_states, r.sync_module_states);
  EXPECT_EQ(d.buffer_sync, r.buffer_sync);
  EXPECT_EQ(d.auto_wrap_policy, r.auto_wrap_policy);
  EXPECT_EQ(d.auto_wrap_min_params, r.auto_wrap_min_params);
  EXPECT_EQ(d.auto_wrap_module_types, r.auto_wrap_module_types);
  EXPECT_EQ(d.param_dtype, r.param_dtype);
  EXPECT_EQ(d.reduce_dtype, r.reduce_dtype);
  EXPECT_EQ(d.buffer_dtype, r.buffer_dtype);
  EXPECT_EQ(d.output_dtype, r.output_dtype);
  EXPECT_EQ(d.cast_forward_inputs, r.cast_forward_inputs);
  EXPECT_EQ(d.autocast, r.autocast);
  EXPECT_EQ(d.autocast_dtype, r.autocast_dtype);
  EXPECT_TRUE(r.unit_hooks.empty());
  EXPECT_EQ(d.keep_param_dtype_shard, r.keep_param_dtype_shard);
  for (const auto& [ds, rs] : {std::pair{d.offload_params, r.offload_params}, {d.offload_grads, r.offload_grads}}) {
    EXPECT_EQ(ds.target, rs.target);
    EXPECT_EQ(ds.nvme_path, rs.nvme_path);
    EXPECT_EQ(ds.pin_memory, rs.pin_memory);
    EXPECT_EQ(ds.block_size, rs.block_size);
    EXPECT_EQ(ds.queue_depth, rs.queue_depth);
    EXPECT_EQ(ds.io_backend, rs.io_backend);
  }
}

TEST(Resolve, OptimizerScheduleAndScalerDefaultsAreTheSchemas) {
  const RunOptions r = resolve(Config());
  const OptimizerOptions o;
  EXPECT_EQ(o.type, r.optimizer.type);
  EXPECT_EQ(o.lr, r.optimizer.lr);
  EXPECT_EQ(o.beta1, r.optimizer.beta1);
  EXPECT_EQ(o.beta2, r.optimizer.beta2);
  EXPECT_EQ(o.eps, r.optimizer.eps);
  EXPECT_EQ(o.weight_decay, r.optimizer.weight_decay);
  EXPECT_EQ(o.momentum, r.optimizer.momentum);
  EXPECT_EQ(o.nesterov, r.optimizer.nesterov);
  const ParamGroupOptions g;
  EXPECT_EQ(0.01, r.param_groups.weight_decay) << "the optimizer's weight decay (ParamGroupOptions' own is 0)";
  EXPECT_EQ(g.no_decay_1d_and_embeddings, r.param_groups.no_decay_1d_and_embeddings);
  EXPECT_TRUE(r.param_groups.rules.empty());
  const LrScheduleOptions s;
  EXPECT_EQ(s.type, r.scheduler.type);
  EXPECT_EQ(s.warmup_steps, r.scheduler.warmup_steps);
  EXPECT_EQ(s.total_steps, r.scheduler.total_steps);
  EXPECT_EQ(s.min_lr_ratio, r.scheduler.min_lr_ratio);
  EXPECT_EQ(s.step_size, r.scheduler.step_size);
  EXPECT_EQ(s.gamma, r.scheduler.gamma);
  const LossScaleOptions l;
  EXPECT_EQ(l.mode, r.loss_scale.mode);
  EXPECT_EQ(l.initial_scale, r.loss_scale.initial_scale);
  EXPECT_EQ(l.growth_factor, r.loss_scale.growth_factor);
  EXPECT_EQ(l.backoff_factor, r.loss_scale.backoff_factor);
  EXPECT_EQ(l.growth_interval, r.loss_scale.growth_interval);
  EXPECT_EQ(l.hysteresis, r.loss_scale.hysteresis);
  EXPECT_EQ(l.min_scale, r.loss_scale.min_scale);
  EXPECT_FALSE(r.fp16);
}

TEST(Resolve, OffloadCheckpointAndRunDefaultsAreTheSchemas) {
  const RunOptions r = resolve(Config());
  const OffloadOptions o;
  EXPECT_EQ(r.offload.target, OffloadTarget::kDevice) << "offload.optimizer (OffloadOptions' own default is CPU)";
  EXPECT_EQ(o.params, r.offload.params);
  EXPECT_EQ(o.nvme_path, r.offload.nvme_path);
  EXPECT_EQ(o.pin_memory, r.offload.pin_memory);
  EXPECT_EQ(o.block_size, r.offload.block_size);
  EXPECT_EQ(o.queue_depth, r.offload.queue_depth);
  EXPECT_EQ(o.buffer_count, r.offload.buffer_count);
  EXPECT_EQ(o.nvme_generations, r.offload.nvme_generations);
  EXPECT_EQ(o.io_backend, r.offload.io_backend);
  EXPECT_EQ(StoreOptions().generations, r.sharding.offload_params.generations) << "optimizer state not on NVMe";
  const CheckpointOptions c;
  EXPECT_EQ(c.dir, r.checkpoint.dir);
  EXPECT_EQ(c.keep_last, r.checkpoint.keep_last);
  EXPECT_EQ(c.async_save, r.checkpoint.async_save);
  const PretrainedOptions p;
  EXPECT_EQ(p.strict, r.pretrained.strict);
  EXPECT_EQ(p.strip_prefix, r.pretrained.strip_prefix);
  EXPECT_EQ(p.add_prefix, r.pretrained.add_prefix);
  EXPECT_EQ(p.rename, r.pretrained.rename);
  EXPECT_EQ(p.not_required, r.pretrained.not_required);
  EXPECT_EQ(r.init_from, "");
  const lora::Options lo;
  EXPECT_EQ(r.lora.rank, 0) << "off (lora::Options' own default is 8, for code that asks for adapters)";
  EXPECT_EQ(lo.alpha, r.lora.alpha);
  EXPECT_EQ(lo.dropout, r.lora.dropout);
  EXPECT_EQ(lo.targets, r.lora.targets);
  const models::GptOptions m;
  EXPECT_EQ(m.vocab_size, r.model.vocab_size);
  EXPECT_EQ(m.d_model, r.model.d_model);
  EXPECT_EQ(m.n_head, r.model.n_head);
  EXPECT_EQ(m.n_layer, r.model.n_layer);
  EXPECT_EQ(m.seq_len, r.model.seq_len);
  EXPECT_EQ(m.mlp_ratio, r.model.mlp_ratio);
  EXPECT_EQ(m.dropout, r.model.dropout);
  EXPECT_EQ(m.checkpointing.enabled, r.model.checkpointing.enabled);
  EXPECT_EQ(m.checkpointing.every_n_blocks, r.model.checkpointing.every_n_blocks);
}

TEST(Resolve, TrainingProgramDefaultsAreTheSchemas) {
  const RunOptions r = resolve(Config());
  const TrainOptions t;
  EXPECT_EQ(t.steps, r.train.steps);
  EXPECT_EQ(t.epochs, r.train.epochs);
  EXPECT_EQ(t.batch_size, r.train.batch_size);
  EXPECT_EQ(t.micro_batches, r.train.micro_batches);
  EXPECT_EQ(t.no_sync, r.train.no_sync);
  EXPECT_EQ(t.eval_interval, r.train.eval_interval);
  EXPECT_EQ(t.eval_batches, r.train.eval_batches);
  EXPECT_EQ(t.log_interval, r.train.log_interval);
  EXPECT_EQ(t.grad_clip_norm, r.train.grad_clip_norm);
  EXPECT_EQ(t.checkpoint_interval, r.train.checkpoint_interval);
  EXPECT_EQ(t.num_workers, r.train.num_workers);
  EXPECT_EQ(t.prefetch_batches, r.train.prefetch_batches);
  EXPECT_EQ(t.pin_memory, r.train.pin_memory);
  EXPECT_EQ(t.shuffle, r.train.shuffle);
  EXPECT_EQ(t.limit_train_samples, r.train.limit_train_samples);
  EXPECT_EQ(t.limit_eval_samples, r.train.limit_eval_samples);
  EXPECT_EQ(t.seed, r.train.seed);
  const DataOptions d;
  EXPECT_EQ(d.path, r.data.path);
  EXPECT_EQ(d.val_fraction, r.data.val_fraction);
  const SampleOptions s;
  EXPECT_EQ(s.tokens, r.sample.tokens);
  EXPECT_EQ(s.temperature, r.sample.temperature);
  EXPECT_EQ(s.top_k, r.sample.top_k);
  EXPECT_EQ(s.prompt, r.sample.prompt);
  EXPECT_EQ(s.seed, r.sample.seed);
  const ProgressSettings p;
  EXPECT_EQ(p.style, r.progress.style);
  EXPECT_EQ(p.tensorboard_dir, r.progress.tensorboard_dir);
  const EstimateOptions e;
  EXPECT_EQ(e.optimizer, r.estimate.optimizer);
  EXPECT_EQ(e.optimizer_state_bytes, r.estimate.optimizer_state_bytes);
  EXPECT_EQ(e.offload_optimizer, r.estimate.offload_optimizer);
  EXPECT_EQ(e.offload_buffer_count, r.estimate.offload_buffer_count);
  EXPECT_EQ(e.offload_block_size, r.estimate.offload_block_size);
  EXPECT_EQ(e.nvme_generations, r.estimate.nvme_generations);
}

TEST(Resolve, EverySectionMapsItsKeys) {
  const RunOptions r = resolve(with(
      {"runtime.device=CPU", "runtime.seed=7", "comm.timeout_s=2.5", "comm.backend=MPI", "logging.level=debug",
       "logging.ranks=all", "memory.limit_mib=64", "sharding.strategy=HYBRID_SHARD", "sharding.hybrid_group_size=2",
       "sharding.backward_prefetch=BACKWARD_POST", "sharding.buffer_sync=BROADCAST", "precision.param_dtype=BF16",
       "precision.reduce_dtype=FP16", "offload.optimizer=NVME", "offload.params=NVME", "offload.nvme_path=/nvme",
       "offload.io_backend=THREADS", "offload.buffer_count=3", "optimizer.type=SGD", "optimizer.momentum=0.9",
       "optimizer.lr=0.5", "scheduler.type=STEP", "scheduler.gamma=0.5", "precision.loss_scale.mode=STATIC",
       "checkpoint.dir=ck", "checkpoint.interval_steps=5", "model.d_model=96", "model.n_head=3",
       "activation_checkpointing.enabled=true", "activation_checkpointing.every_n_blocks=2", "train.steps=9",
       "data.path=/d", "sample.top_k=3", "logging.progress=LINES"}));
  EXPECT_EQ(r.session.device, DevicePolicy::kCpu);
  EXPECT_EQ(r.session.seed, 7u);
  EXPECT_EQ(r.session.comm.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(r.session.comm_backend, CommBackend::kMpi);
  EXPECT_EQ(r.session.log.level, LogLevel::kDebug);
  EXPECT_TRUE(r.session.log.all_ranks);
  EXPECT_EQ(r.session.memory.limit_mib, 64);
  EXPECT_EQ(r.session.memory.limit_source, "memory.limit_mib = 64");
  EXPECT_EQ(r.sharding.strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(r.sharding.hybrid_group_size, 2);
  EXPECT_EQ(r.sharding.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_EQ(r.sharding.buffer_sync, BufferSync::kBroadcast);
  EXPECT_EQ(r.sharding.param_dtype, c10::kBFloat16);
  EXPECT_EQ(r.sharding.reduce_dtype, c10::kHalf);
  EXPECT_TRUE(r.fp16) << "FP16 in the reduction";
  EXPECT_EQ(r.sharding.offload_params.target, OffloadTarget::kNvme);
  EXPECT_EQ(r.sharding.offload_params.nvme_path, "/nvme");
  EXPECT_EQ(r.sharding.offload_params.io_backend, IoBackend::kThreads);
  EXPECT_EQ(r.sharding.offload_grads.target, OffloadTarget::kDevice);
  EXPECT_EQ(r.sharding.offload_params.generations, 2) << "the optimizer's master in the store, as its state";
  EXPECT_EQ(r.sharding.offload_grads.generations, 1);
  EXPECT_FALSE(r.estimate.gpu) << "runtime.device = CPU";
  EXPECT_EQ(r.offload.target, OffloadTarget::kNvme);
  EXPECT_EQ(r.offload.params, OffloadTarget::kNvme) << "the optimizer knows the engine's parameter placement";
  EXPECT_EQ(r.offload.buffer_count, 3);
  EXPECT_EQ(r.optimizer.type, OptimizerOptions::Type::kSgd);
  EXPECT_EQ(r.optimizer.momentum, 0.9);
  EXPECT_EQ(r.optimizer.lr, 0.5);
  EXPECT_EQ(r.scheduler.type, LrScheduleOptions::Type::kStep);
  EXPECT_EQ(r.scheduler.gamma, 0.5);
  EXPECT_EQ(r.loss_scale.mode, LossScaleMode::kStatic);
  EXPECT_EQ(r.checkpoint.dir, "ck");
  EXPECT_EQ(r.train.checkpoint_interval, 5);
  EXPECT_EQ(r.model.d_model, 96);
  EXPECT_TRUE(r.model.checkpointing.enabled);
  EXPECT_EQ(r.model.checkpointing.every_n_blocks, 2);
  EXPECT_EQ(r.train.steps, 9);
  EXPECT_EQ(r.train.seed, 7u);
  EXPECT_EQ(r.data.path, "/d");
  EXPECT_EQ(r.sample.top_k, 3);
  EXPECT_EQ(r.progress.style, ProgressStyle::kLines);
  EXPECT_EQ(r.estimate.optimizer, "SGD");
  EXPECT_EQ(r.estimate.optimizer_state_bytes, 4) << "SGD with momentum: one buffer";
  EXPECT_EQ(r.estimate.offload_params, OffloadTarget::kNvme);
  EXPECT_EQ(r.estimate.offload_buffer_count, 3);
  EXPECT_EQ(r.estimate.offload_block_size, 1048576);
}

// With autocast, param_dtype names the autocast dtype and the parameters stay fp32.
TEST(Resolve, AutocastKeepsFp32Parameters) {
  const ShardingOptions o = resolve(with({"precision.param_dtype=BF16", "precision.autocast=true"})).sharding;
  EXPECT_TRUE(o.autocast);
  EXPECT_EQ(o.autocast_dtype, c10::kBFloat16);
  EXPECT_EQ(o.param_dtype, c10::kFloat);
  EXPECT_FALSE(resolve(with({"precision.param_dtype=BF16"})).fp16);
  EXPECT_TRUE(resolve(with({"precision.param_dtype=FP16"})).fp16);
}

// The adapters are unit hooks: NF4 storage of the frozen Linear weights, then LoRA.
TEST(Resolve, AdaptersBecomeUnitHooks) {
  const RunOptions lora = resolve(with({"lora.rank=4", "lora.alpha=8", "lora.targets= *.qkv, ,*.fc "}));
  EXPECT_EQ(lora.sharding.unit_hooks.size(), 1u);
  EXPECT_EQ(lora.lora.rank, 4);
  EXPECT_EQ(lora.lora.alpha, 8);
  EXPECT_EQ(lora.lora.targets, (std::vector<std::string>{"*.qkv", "*.fc"}));
  EXPECT_EQ(lora.pretrained.not_required, (std::vector<std::string>{"*lora_A", "*lora_B"}));
  const RunOptions qlora = resolve(with({"lora.rank=4", "precision.frozen_linear=NF4"}));
  ASSERT_EQ(qlora.sharding.unit_hooks.size(), 2u);
  EXPECT_NE(qlora.sharding.unit_hooks[0]->codec_for(torch::nn::LinearImpl(2, 2), "weight"), nullptr)
      << "the first hook stores frozen Linear weights in NF4";
}

// Rules get the config's names in what the engine reports ("why" a parameter has its group).
TEST(Resolve, ParamGroupRulesAreLabelledByTheirKey) {
  const Config c = parse_config_textproto(
      "optimizer { weight_decay: 0.3 no_decay_1d_and_embeddings: false "
      "param_groups { match: \"head.*\" lr_scale: 10 } param_groups { match: \"*.bias\" weight_decay: 0 } }",
      "groups.textproto");
  const ParamGroupOptions o = resolve(c).param_groups;
  EXPECT_EQ(o.weight_decay, 0.3);
  EXPECT_FALSE(o.no_decay_1d_and_embeddings);
  ASSERT_EQ(o.rules.size(), 2u);
  EXPECT_EQ(o.rules[0].match, "head.*");
  EXPECT_FALSE(o.rules[0].weight_decay.has_value());
  EXPECT_EQ(o.rules[0].lr_scale, 10);
  EXPECT_EQ(o.rules[0].label, "optimizer.param_groups[0]");
  EXPECT_EQ(o.rules[1].weight_decay.value_or(-1), 0);
  EXPECT_EQ(o.rules[1].label, "optimizer.param_groups[1]");
}

TEST(Resolve, RefusesAnInvalidConfig) {
  Config c;
  apply_override(c, "offload.params=CPU");
  const std::string err = test::error_text_of<UsageError>([&] { resolve(c); });
  EXPECT_NE(err.find("resolve() needs a validated config (build_config or validate_config): offload.params = CPU "
                     "needs offload.optimizer = CPU or NVME"),
            std::string::npos)
      << err;
}

// ---- load_run: what a program acts on ----

Run load(const std::vector<std::string>& args, const Program& program) {
  unsetenv("ZS_CONFIG");
  std::vector<const char*> argv = {"prog"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return load_run(static_cast<int>(argv.size()), argv.data(), program);
}

const Program& fashion() {
  static const Program p{"train_fashion_mnist", {keys::engine(), keys::trainer(), {"model.dropout", "data.path"}}};
  return p;
}

TEST(LoadRun, RefusesAKeyTheProgramDoesNotActOn) {
  const std::string err = test::error_text_of<ConfigError>([] { load({"--set", "lora.rank=8"}, fashion()); });
  EXPECT_NE(err.find("train_fashion_mnist does not act on lora.rank (set by --set lora.rank=8), so the run would "
                     "ignore it: remove it; train_fashion_mnist acts on runtime, comm, logging.level, logging.ranks, "
                     "memory, sharding, precision.param_dtype, "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(", model.dropout, data.path"), std::string::npos) << err;
}

TEST(LoadRun, NamesEveryRefusedKeyAndWhereItWasSet) {
  const std::string file = ::testing::TempDir() + "zs_test_load_run.textproto";
  std::ofstream(file) << "sample { tokens: 5 }\nmodel { dropout: 0.2 n_layer: 3 }\n";
  const std::string err =
      test::error_text_of<ConfigError>([&] { load({"--config", file, "--set", "lora.rank=8", "x"}, fashion()); });
  EXPECT_NE(err.find("train_fashion_mnist does not act on 3 keys that were set: model.n_layer (set by config file " +
                     file + "), sample.tokens (set by config file " + file +
                     "), lora.rank (set by --set lora.rank=8), so the run would ignore them: remove them; "),
            std::string::npos)
      << err;
}

TEST(LoadRun, ResolvesWhatTheProgramActsOn) {
  const zeroshard::Run run =
      load({"--set", "model.dropout=0.3", "--min-accuracy", "0.5", "--set", "train.steps=4"}, fashion());
  EXPECT_EQ(run.options.model.dropout, 0.3);
  EXPECT_EQ(run.options.train.steps, 4);
  EXPECT_EQ(run.args, (std::vector<std::string>{"prog", "--min-accuracy", "0.5"}));
  EXPECT_EQ(run.config_text(), "model {\n  dropout: 0.3\n}\ntrain {\n  steps: 4\n}\n");
  // Validation comes first: an out-of-range value is reported as such, not as an unread key.
  EXPECT_NE(test::error_text_of<ConfigError>([] { load({"--set", "lora.rank=-1"}, fashion()); })
                .find("lora.rank = -1 is out of range; allowed: [0, 65536]"),
            std::string::npos);
}

TEST(LoadRun, ProgramsThatReadAnotherProgramsConfigFileAcceptItsKeys) {
  Program estimate{"zeroshard-estimate", {{"sharding", "precision"}}};
  estimate.accept_unread_in_file = true;
  const std::string file = ::testing::TempDir() + "zs_test_load_run_estimate.textproto";
  std::ofstream(file) << "train { steps: 4 }\nsharding { strategy: NO_SHARD }\n";
  EXPECT_EQ(load({"--config", file}, estimate).options.train.steps, 4);
  // A --set of a key the program does not act on is refused even so, naming the key.
  EXPECT_NE(test::error_text_of<ConfigError>([&] { load({"--config", file, "--set", "lora.rank=8"}, estimate); })
                .find("zeroshard-estimate does not act on lora.rank (set by --set lora.rank=8), so the run would "
                      "ignore it: remove it; zeroshard-estimate acts on runtime, comm, logging.level, logging.ranks, "
                      "memory, sharding, precision"),
            std::string::npos);
  // A file key overridden by --set is the override's, and refused.
  EXPECT_NE(test::error_text_of<ConfigError>([&] { load({"--config", file, "--set", "train.steps=5"}, estimate); })
                .find("zeroshard-estimate does not act on train.steps (set by --set train.steps=5)"),
            std::string::npos);
  // The Session's keys are every program's; a section covers its keys, a key only itself.
  const Program selftest{"zeroshard-selftest", {}};
  EXPECT_TRUE(selftest.acts_on("comm.timeout_s"));
  EXPECT_TRUE(selftest.acts_on("logging.level"));
  EXPECT_FALSE(selftest.acts_on("logging.progress"));
  EXPECT_FALSE(selftest.acts_on("comm_x"));
  EXPECT_FALSE(fashion().acts_on("model.n_layer"));
  EXPECT_TRUE(fashion().acts_on("optimizer.param_groups"));
}

}  // namespace
}  // namespace zeroshard
