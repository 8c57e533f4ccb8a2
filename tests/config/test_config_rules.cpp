// SPDX-License-Identifier: Apache-2.0
// The rules between config keys (config/src/config_rules.cpp, docs/config.md "Rules between keys"):
// one test per rule, each with the rule's exact message and the keys it names, the config that
// breaks it and one that satisfies it. Every rule is checked when the config is built, before
// any Session, engine or optimizer exists: none is left to the first step().

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/config/config.h"

namespace zeroshard {
namespace {

using Keys = std::vector<std::string>;

// The problems of a default config with the --set assignments `sets` applied.
std::vector<ConfigProblem> problems_of(const Keys& sets) {
  Config c;
  for (const std::string& s : sets) apply_override(c, s);
  return check_config(c);
}

// `sets` breaks exactly one rule, which names `paths` and says `message`.
void expect_one_problem(const Keys& sets, const Keys& paths, const std::string& message) {
  const std::vector<ConfigProblem> p = problems_of(sets);
  ASSERT_EQ(p.size(), 1u) << (p.empty() ? std::string("no problem") : p[0].message + " | ...");
  EXPECT_EQ(p[0].paths, paths);
  EXPECT_EQ(p[0].message, message);
}

void expect_valid(const Keys& sets) {
  const std::vector<ConfigProblem> p = problems_of(sets);
  EXPECT_TRUE(p.empty()) << p.front().message;
}

TEST(ConfigRules, NcclNeedsAGpu) {
  expect_one_problem({"comm.backend=NCCL", "runtime.device=CPU"}, {"comm.backend", "runtime.device"},
                     "comm.backend = NCCL needs a GPU, but runtime.device = CPU; allowed: comm.backend MPI or AUTO "
                     "with a CPU device, or runtime.device CUDA/AUTO");
  expect_valid({"comm.backend=NCCL", "runtime.device=CUDA"});
}

TEST(ConfigRules, NvmeNeedsAPath) {
  expect_one_problem({"offload.optimizer=NVME"}, {"offload.optimizer", "offload.nvme_path"},
                     "offload.optimizer = NVME needs offload.nvme_path (a directory on the NVMe drive), but it is empty");
  expect_one_problem({"offload.optimizer=CPU", "offload.params=NVME"}, {"offload.params", "offload.nvme_path"},
                     "offload.params = NVME needs offload.nvme_path (a directory on the NVMe drive), but it is empty");
  expect_one_problem({"offload.optimizer=CPU", "offload.grads=NVME"}, {"offload.grads", "offload.nvme_path"},
                     "offload.grads = NVME needs offload.nvme_path (a directory on the NVMe drive), but it is empty");
  expect_valid({"offload.optimizer=NVME", "offload.params=NVME", "offload.grads=NVME", "offload.nvme_path=/nvme"});
}

TEST(ConfigRules, OffloadedParamsNeedAnOffloadedOptimizer) {
  expect_one_problem({"offload.params=CPU"}, {"offload.params", "offload.optimizer"},
                     "offload.params = CPU needs offload.optimizer = CPU or NVME (the fp32 master and moments live "
                     "with the offloaded optimizer, whose step streams the parameter shards), but offload.optimizer "
                     "= DEVICE");
  expect_valid({"offload.params=CPU", "offload.optimizer=CPU"});
}

TEST(ConfigRules, OffloadedGradsNeedAnOffloadedOptimizer) {
  expect_one_problem({"offload.grads=CPU"}, {"offload.grads", "offload.optimizer"},
                     "offload.grads = CPU needs offload.optimizer = CPU or NVME (the offloaded optimizer's step "
                     "brings each gradient shard in with its parameters), but offload.optimizer = DEVICE");
  expect_valid({"offload.grads=CPU", "offload.optimizer=CPU"});
}

TEST(ConfigRules, ParamDtypeCopyNeedsOffloadedParams) {
  expect_one_problem({"offload.keep_param_dtype_shard=true", "precision.param_dtype=BF16"},
                     {"offload.keep_param_dtype_shard", "offload.params"},
                     "offload.keep_param_dtype_shard = true needs offload.params = CPU or NVME (it keeps a "
                     "param_dtype copy beside an offloaded fp32 shard), but offload.params = DEVICE");
  expect_valid({"offload.keep_param_dtype_shard=true", "precision.param_dtype=BF16", "offload.params=CPU",
                "offload.optimizer=CPU"});
}

TEST(ConfigRules, OverlapStepNeedsHostStateResidentShardsAndNoLossScaling) {
  expect_one_problem({"offload.overlap_step=true"},
                     {"offload.overlap_step", "offload.optimizer", "offload.params", "offload.grads"},
                     "offload.overlap_step = true needs offload.optimizer = CPU with offload.params and "
                     "offload.grads = DEVICE (the step during backward updates shards in memory from the host "
                     "state), but offload.optimizer = DEVICE, offload.params = DEVICE, offload.grads = DEVICE");
  expect_one_problem({"offload.overlap_step=true", "offload.optimizer=CPU", "offload.grads=CPU"},
                     {"offload.overlap_step", "offload.optimizer", "offload.params", "offload.grads"},
                     "offload.overlap_step = true needs offload.optimizer = CPU with offload.params and "
                     "offload.grads = DEVICE (the step during backward updates shards in memory from the host "
                     "state), but offload.optimizer = CPU, offload.params = DEVICE, offload.grads = CPU");
  expect_one_problem({"offload.overlap_step=true", "offload.optimizer=CPU", "precision.param_dtype=FP16"},
                     {"offload.overlap_step", "precision.loss_scale.mode"},
                     "offload.overlap_step = true does not combine with loss scaling (precision.loss_scale.mode = "
                     "AUTO, dynamic with FP16): unscaling changes every step's gradients after backward, so every "
                     "step would be redone; use BF16, or turn overlap_step off");
  expect_valid({"offload.overlap_step=true", "offload.optimizer=CPU"});
  expect_valid({"offload.overlap_step=true", "offload.optimizer=CPU", "precision.param_dtype=BF16"});
}

TEST(ConfigRules, ParamDtypeCopyNeedsALowPrecisionComputeDtype) {
  const Keys offloaded = {"offload.keep_param_dtype_shard=true", "offload.params=CPU", "offload.optimizer=CPU"};
  expect_one_problem(offloaded, {"offload.keep_param_dtype_shard", "precision.param_dtype"},
                     "offload.keep_param_dtype_shard = true needs precision.param_dtype = BF16 or FP16 without "
                     "precision.autocast (the copy is the shard in the dtype units compute in), but "
                     "precision.param_dtype = FP32");
  Keys autocast = offloaded;
  autocast.insert(autocast.end(), {"precision.param_dtype=BF16", "precision.autocast=true"});
  expect_one_problem(autocast, {"offload.keep_param_dtype_shard", "precision.param_dtype"},
                     "offload.keep_param_dtype_shard = true needs precision.param_dtype = BF16 or FP16 without "
                     "precision.autocast (the copy is the shard in the dtype units compute in), but "
                     "precision.param_dtype = BF16 with precision.autocast = true");
}

TEST(ConfigRules, AutocastNeedsALowPrecisionDtype) {
  expect_one_problem({"precision.autocast=true"}, {"precision.autocast", "precision.param_dtype"},
                     "precision.autocast = true needs precision.param_dtype = BF16 or FP16 (the dtype forward runs "
                     "in under autocast; the parameters stay fp32), but precision.param_dtype = FP32");
  expect_valid({"precision.autocast=true", "precision.param_dtype=BF16"});
}

TEST(ConfigRules, DynamicLossScaleStartsAtOrAboveItsMinimum) {
  const Keys paths = {"precision.loss_scale.min_scale", "precision.loss_scale.initial_scale",
                      "precision.loss_scale.mode"};
  expect_one_problem({"precision.loss_scale.mode=DYNAMIC", "precision.loss_scale.initial_scale=8",
                      "precision.loss_scale.min_scale=16"},
                     paths,
                     "precision.loss_scale.min_scale = 16 exceeds precision.loss_scale.initial_scale = 8 with a "
                     "dynamic loss scale (precision.loss_scale.mode = DYNAMIC): the scale starts at initial_scale and "
                     "never backs off below min_scale");
  // AUTO is dynamic with FP16 in the gathered parameters or the reduction.
  expect_one_problem({"precision.reduce_dtype=FP16", "precision.loss_scale.initial_scale=8",
                      "precision.loss_scale.min_scale=16"},
                     paths,
                     "precision.loss_scale.min_scale = 16 exceeds precision.loss_scale.initial_scale = 8 with a "
                     "dynamic loss scale (precision.loss_scale.mode = AUTO, dynamic with FP16): the scale starts at "
                     "initial_scale and never backs off below min_scale");
  expect_valid({"precision.loss_scale.initial_scale=8", "precision.loss_scale.min_scale=16"});  // AUTO, no FP16
  expect_valid({"precision.loss_scale.mode=STATIC", "precision.loss_scale.initial_scale=8",
                "precision.loss_scale.min_scale=16"});
}

TEST(ConfigRules, Nf4StorageNeedsLora) {
  expect_one_problem({"precision.frozen_linear=NF4"}, {"precision.frozen_linear", "lora.rank"},
                     "precision.frozen_linear = NF4 needs lora.rank > 0 (only frozen Linear weights are stored in NF4, "
                     "and without LoRA every weight trains), but lora.rank = 0");
  expect_valid({"precision.frozen_linear=NF4", "lora.rank=4"});
}

TEST(ConfigRules, ModuleTypeAutoWrapNeedsTypes) {
  expect_one_problem({"sharding.auto_wrap_policy=MODULE_TYPE", "sharding.auto_wrap_module_types= , "},
                     {"sharding.auto_wrap_policy", "sharding.auto_wrap_module_types"},
                     "sharding.auto_wrap_policy = MODULE_TYPE needs sharding.auto_wrap_module_types (the module types "
                     "to wrap, e.g. \"torch::nn::Linear,GptBlock\"), but it is empty");
  expect_valid({"sharding.auto_wrap_policy=MODULE_TYPE", "sharding.auto_wrap_module_types=GptBlock"});
}

TEST(ConfigRules, CosineNeedsTotalSteps) {
  expect_one_problem({"scheduler.type=COSINE"}, {"scheduler.type", "scheduler.total_steps"},
                     "scheduler.type = COSINE needs scheduler.total_steps > 0 (the step where the decay ends)");
  expect_valid({"scheduler.type=COSINE", "scheduler.total_steps=100"});
}

TEST(ConfigRules, TotalStepsExceedTheWarmup) {
  expect_one_problem({"scheduler.warmup_steps=10", "scheduler.total_steps=10"},
                     {"scheduler.total_steps", "scheduler.warmup_steps"},
                     "scheduler.total_steps = 10 must exceed scheduler.warmup_steps = 10");
  expect_valid({"scheduler.type=COSINE", "scheduler.total_steps=11", "scheduler.warmup_steps=10"});
}

TEST(ConfigRules, LinearWarmupMinimumNeedsTotalSteps) {
  expect_one_problem({"scheduler.type=LINEAR_WARMUP", "scheduler.min_lr_ratio=0.1"},
                     {"scheduler.min_lr_ratio", "scheduler.total_steps", "scheduler.type"},
                     "scheduler.min_lr_ratio = 0.1 needs scheduler.total_steps > 0 with scheduler.type = LINEAR_WARMUP "
                     "(without total_steps the lr stays constant after the warmup and never reaches the minimum)");
  expect_valid({"scheduler.type=LINEAR_WARMUP", "scheduler.min_lr_ratio=0.1", "scheduler.total_steps=50"});
  expect_valid({"scheduler.type=LINEAR_WARMUP", "scheduler.warmup_steps=10"});
}

TEST(ConfigRules, NesterovNeedsMomentum) {
  expect_one_problem({"optimizer.type=SGD", "optimizer.nesterov=true"}, {"optimizer.nesterov", "optimizer.momentum"},
                     "optimizer.nesterov = true needs optimizer.momentum > 0");
  expect_valid({"optimizer.type=SGD", "optimizer.nesterov=true", "optimizer.momentum=0.9"});
}

TEST(ConfigRules, MomentumAndNesterovApplyOnlyToSgd) {
  expect_one_problem({"optimizer.momentum=0.9"}, {"optimizer.momentum", "optimizer.type"},
                     "optimizer.momentum = 0.9 applies only to optimizer.type = SGD, but optimizer.type = ADAMW; "
                     "remove it or use SGD");
  expect_one_problem({"optimizer.type=ADAM", "optimizer.momentum=0.5"}, {"optimizer.momentum", "optimizer.type"},
                     "optimizer.momentum = 0.5 applies only to optimizer.type = SGD, but optimizer.type = ADAM; "
                     "remove it or use SGD");
  // nesterov with an Adam type: its own message (and the momentum rule, momentum being 0).
  const std::vector<ConfigProblem> p = problems_of({"optimizer.nesterov=true"});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].paths, (Keys{"optimizer.nesterov", "optimizer.type"}));
  EXPECT_EQ(p[1].message,
            "optimizer.nesterov = true applies only to optimizer.type = SGD, but optimizer.type = ADAMW; remove it or "
            "use SGD");
  expect_valid({"optimizer.type=SGD", "optimizer.momentum=0.9"});
}

// Keys that mean something only under another key's value are refused without it (they would be
// ignored).
TEST(ConfigRules, DependentKeysNeedTheKeyTheyApplyTo) {
  expect_one_problem({"activation_checkpointing.every_n_blocks=2"},
                     {"activation_checkpointing.every_n_blocks", "activation_checkpointing.enabled"},
                     "activation_checkpointing.every_n_blocks = 2 applies only with activation_checkpointing.enabled = "
                     "true; enable it or remove the key");
  expect_valid({"activation_checkpointing.every_n_blocks=2", "activation_checkpointing.enabled=true"});
  expect_one_problem({"lora.alpha=8"}, {"lora.alpha", "lora.rank"},
                     "lora.alpha applies only with LoRA adapters (lora.rank > 0), but lora.rank = 0; set lora.rank or "
                     "remove the key");
  expect_one_problem({"lora.targets=*.fc"}, {"lora.targets", "lora.rank"},
                     "lora.targets applies only with LoRA adapters (lora.rank > 0), but lora.rank = 0; set lora.rank or "
                     "remove the key");
  expect_one_problem({"lora.dropout=0.1"}, {"lora.dropout", "lora.rank"},
                     "lora.dropout applies only with LoRA adapters (lora.rank > 0), but lora.rank = 0; set lora.rank or "
                     "remove the key");
  expect_valid({"lora.rank=4", "lora.alpha=8", "lora.dropout=0.1", "lora.targets=*.fc"});
  expect_one_problem({"scheduler.step_size=10"}, {"scheduler.step_size", "scheduler.type"},
                     "scheduler.step_size = 10 applies only to scheduler.type = STEP, but scheduler.type = CONSTANT; "
                     "remove it or use STEP");
  expect_one_problem({"scheduler.type=COSINE", "scheduler.total_steps=10", "scheduler.gamma=0.5"},
                     {"scheduler.gamma", "scheduler.type"},
                     "scheduler.gamma = 0.5 applies only to scheduler.type = STEP, but scheduler.type = COSINE; remove "
                     "it or use STEP");
  expect_valid({"scheduler.type=STEP", "scheduler.step_size=10", "scheduler.gamma=0.5"});
  expect_one_problem({"checkpoint.keep_last=5"}, {"checkpoint.keep_last", "checkpoint.dir"},
                     "checkpoint.keep_last = 5 applies only when checkpoints are saved (checkpoint.dir), but "
                     "checkpoint.dir is empty; set it or remove the key");
  expect_one_problem({"checkpoint.async_save=true"}, {"checkpoint.async_save", "checkpoint.dir"},
                     "checkpoint.async_save = true applies only when checkpoints are saved (checkpoint.dir), but "
                     "checkpoint.dir is empty; set it or remove the key");
  expect_valid({"checkpoint.dir=ck", "checkpoint.keep_last=5", "checkpoint.async_save=true"});
  expect_one_problem({"sample.tokens=0", "sample.top_k=5"}, {"sample.top_k", "sample.tokens"},
                     "sample.top_k applies only when a sample is drawn (sample.tokens > 0), but sample.tokens = 0; set "
                     "sample.tokens or remove the key");
  expect_one_problem({"sample.tokens=0", "sample.prompt=Once"}, {"sample.prompt", "sample.tokens"},
                     "sample.prompt applies only when a sample is drawn (sample.tokens > 0), but sample.tokens = 0; set "
                     "sample.tokens or remove the key");
  expect_valid({"sample.tokens=0"});
  expect_one_problem({"sharding.gather_quantization_block=32"},
                     {"sharding.gather_quantization_block", "sharding.gather_quantization"},
                     "sharding.gather_quantization_block = 32 applies only to quantized gathers "
                     "(sharding.gather_quantization = INT8), but sharding.gather_quantization = NONE; set it or remove "
                     "the key");
  expect_valid({"sharding.gather_quantization=INT8", "sharding.gather_quantization_block=32"});
  expect_one_problem({"sharding.gather_quantization=INT8", "sharding.strategy=NO_SHARD"},
                     {"sharding.gather_quantization", "sharding.strategy"},
                     "sharding.gather_quantization = INT8 quantizes the parameter all-gathers, but sharding.strategy = "
                     "NO_SHARD gathers none (every rank keeps every parameter)");
  expect_one_problem({"sharding.reduce_quantization_block=32"},
                     {"sharding.reduce_quantization_block", "sharding.reduce_quantization"},
                     "sharding.reduce_quantization_block = 32 applies only to quantized reduce-scatters "
                     "(sharding.reduce_quantization = INT8), but sharding.reduce_quantization = NONE; set it or remove "
                     "the key");
  expect_valid({"sharding.reduce_quantization=INT8", "sharding.reduce_quantization_block=32"});
  expect_one_problem({"sharding.reduce_quantization=INT8", "sharding.strategy=NO_SHARD"},
                     {"sharding.reduce_quantization", "sharding.strategy"},
                     "sharding.reduce_quantization = INT8 quantizes the gradient reduce-scatters, but "
                     "sharding.strategy = NO_SHARD reduce-scatters none (its gradients are all-reduced exactly)");
  expect_valid({"sample.tokens=10", "sample.top_k=5", "sample.temperature=0.5", "sample.prompt=Once", "sample.seed=3"});
}

// optimizer.param_groups is a list (a config file's): its entries are checked with the rules.
TEST(ConfigRules, ParamGroupEntriesAreChecked) {
  Config c = parse_config_textproto(
      "optimizer { param_groups { match: \"\" } param_groups { match: \"*.bias\" weight_decay: -1 } "
      "param_groups { match: \"h*\" lr_scale: nan } param_groups { match: \"ok.*\" weight_decay: 0 } }",
      "groups.textproto");
  const std::vector<ConfigProblem> p = check_config(c);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].message,
            "optimizer.param_groups[0].match is empty; give a glob over parameter names, e.g. '*.bias' or "
            "'blocks.*.attn.*'");
  EXPECT_EQ(p[1].message, "optimizer.param_groups[1].weight_decay = -1 is out of range; allowed: >= 0");
  EXPECT_EQ(p[2].message, "optimizer.param_groups[2].lr_scale = nan is out of range; allowed: >= 0");
  for (const ConfigProblem& q : p) EXPECT_EQ(q.paths, (Keys{"optimizer.param_groups"}));
}

TEST(ConfigRules, DModelIsAMultipleOfNHead) {
  expect_one_problem({"model.d_model=100", "model.n_head=3"}, {"model.d_model", "model.n_head"},
                     "model.d_model = 100 must be a multiple of model.n_head = 3 (each head gets d_model / n_head "
                     "features)");
  expect_valid({"model.d_model=96", "model.n_head=3"});
  expect_one_problem({"model.n_head=0"}, {"model.n_head"}, "model.n_head = 0 is out of range; allowed: [1, 4096]");
}

TEST(ConfigRules, InitRenameIsAListOfPairs) {
  expect_one_problem({"model.init_rename=a.w=b.w, c"}, {"model.init_rename"},
                     "model.init_rename = 'a.w=b.w, c': 'c' is not file_name=model_name (pairs are separated by "
                     "commas)");
  expect_valid({"model.init_rename= a.w=b.w , c=d"});
}

TEST(ConfigRules, CheckpointIntervalNeedsADirectory) {
  expect_one_problem({"checkpoint.interval_steps=100"}, {"checkpoint.interval_steps", "checkpoint.dir"},
                     "checkpoint.interval_steps = 100 needs checkpoint.dir, but it is empty");
  expect_valid({"checkpoint.interval_steps=100", "checkpoint.dir=ckpt"});
}

TEST(ConfigRules, AsyncSaveNeedsTheOptimizerStateInMemory) {
  const Keys nvme = {"offload.optimizer=NVME", "offload.nvme_path=/nvme"};
  Keys sets = nvme;
  sets.push_back("checkpoint.dir=ck");
  sets.push_back("checkpoint.async_save=true");
  expect_one_problem(sets, {"checkpoint.async_save", "offload.optimizer"},
                     "checkpoint.async_save = true needs the optimizer state in memory (an async save copies it whole "
                     "before writing), but offload.optimizer = NVME; a synchronous save streams it from the drive "
                     "shard by shard");
  expect_valid(nvme);
  expect_valid({"offload.optimizer=CPU", "checkpoint.dir=ck", "checkpoint.async_save=true"});
}

TEST(ConfigRules, LoggingKeysHaveTheLoggersVocabulary) {
  expect_one_problem({"logging.level=loud"}, {"logging.level"},
                     "logging.level: unknown log level 'loud'; allowed: trace, debug, info, warn, error, off");
  expect_one_problem({"logging.ranks=0,x"}, {"logging.ranks"},
                     "logging.ranks: bad rank list '0,x'; allowed: 'all' or comma-separated ranks like '0,3'");
  expect_valid({"logging.level=DEBUG", "logging.ranks=0,3"});
}

// Every problem is collected (not only the first), each followed by where its values came from.
TEST(ConfigRules, EveryProblemIsReportedWithItsSource) {
  unsetenv("ZS_CONFIG");
  CommandLine cl;
  cl.overrides = {"offload.params=CPU", "scheduler.type=COSINE", "precision.autocast=true"};
  try {
    build_config(cl);
    ADD_FAILURE() << "three broken rules were accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(),
              "3 problems:\n"
              "  offload.params = CPU needs offload.optimizer = CPU or NVME (the fp32 master and moments live with "
              "the offloaded optimizer, whose step streams the parameter shards), but offload.optimizer = DEVICE "
              "(offload.params from --set offload.params=CPU; offload.optimizer from default)\n"
              "  precision.autocast = true needs precision.param_dtype = BF16 or FP16 (the dtype forward runs in "
              "under autocast; the parameters stay fp32), but precision.param_dtype = FP32 (precision.autocast from "
              "--set precision.autocast=true; precision.param_dtype from default)\n"
              "  scheduler.type = COSINE needs scheduler.total_steps > 0 (the step where the decay ends) "
              "(scheduler.type from --set scheduler.type=COSINE; scheduler.total_steps from default)");
  }
}

}  // namespace
}  // namespace zeroshard
