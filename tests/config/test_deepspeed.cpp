// SPDX-License-Identifier: Apache-2.0
// DeepSpeed configs read as zeroshard keys (zeroshard/config/deepspeed.h, docs/deepspeed.md): the
// keys of a typical ZeRO-3 offload config land where the table says, DeepSpeed's traps and its own
// defaults are applied, --set wins over the file, a bad value is reported with the DeepSpeed key it
// came from, and every key or value with no meaning here is refused with its text.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/config.h"
#include "zeroshard/config/deepspeed.h"

namespace zeroshard {
namespace {

using zeroshard::test::contains;

Config imported(const std::string& json, int world_size = 4) {
  Config c;
  for (const DeepSpeedSetting& s : deepspeed_settings(json, "ds.json", world_size)) apply_override(c, s.assignment);
  return c;
}

// The ConfigError's message (without the kind and the source location), or what happened instead.
std::string refusal(const std::string& json, int world_size = 4) {
  try {
    deepspeed_settings(json, "ds.json", world_size);
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "<no ConfigError>";
}

const char* const kZero3Offload = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 4,
  "gradient_clipping": 1.0,
  "steps_per_print": 20,
  "bf16": {"enabled": true},
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 5},
    "overlap_comm": true,
    "contiguous_gradients": true,
    "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto",
    "stage3_gather_16bit_weights_on_model_save": false
  },
  "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-5, "warmup_num_steps": 100,
                           "total_num_steps": 1000, "warmup_type": "linear"}},
  "tensorboard": {"enabled": true, "output_path": "runs", "job_name": "ft"}
})";

TEST(DeepSpeedConfig, Zero3OffloadConfigLandsOnZeroshardKeys) {
  const Config c = imported(kZero3Offload);
  EXPECT_EQ(c.sharding().strategy(), config::ShardingConfig::FULL_SHARD);
  EXPECT_EQ(c.offload().optimizer(), config::OffloadConfig::CPU);
  EXPECT_EQ(c.offload().params(), config::OffloadConfig::NVME);
  EXPECT_EQ(c.offload().nvme_path(), "/local_nvme");
  EXPECT_TRUE(c.offload().pin_memory());
  EXPECT_EQ(c.offload().buffer_count(), 5);
  EXPECT_EQ(c.precision().param_dtype(), config::PrecisionConfig::BF16);
  EXPECT_EQ(c.precision().reduce_dtype(), config::PrecisionConfig::BF16);
  EXPECT_EQ(c.train().batch_size(), 64);
  EXPECT_EQ(c.train().micro_batches(), 4);  // gradient_accumulation_steps, not the micro-batch size
  EXPECT_EQ(c.train().log_interval(), 20);
  EXPECT_EQ(c.optimizer().grad_clip_norm(), 1.0);
  EXPECT_EQ(c.optimizer().type(), config::OptimizerConfig::ADAMW);
  EXPECT_EQ(c.optimizer().beta2(), 0.95);
  EXPECT_EQ(c.optimizer().weight_decay(), 0.1);
  EXPECT_EQ(c.optimizer().lr(), 3e-5);  // the scheduler's warmup_max_lr is the peak, as in DeepSpeed
  EXPECT_EQ(c.scheduler().type(), config::SchedulerConfig::LINEAR_WARMUP);
  EXPECT_EQ(c.scheduler().warmup_steps(), 100);
  EXPECT_EQ(c.scheduler().total_steps(), 1000);
  EXPECT_EQ(c.scheduler().min_lr_ratio(), 0.0);
  EXPECT_EQ(c.logging().tensorboard_dir(), "runs/ft");
  EXPECT_NO_THROW(validate_config(c));
}

TEST(DeepSpeedConfig, TrapsAndDeepSpeedsOwnDefaults) {
  // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false; its weight decay defaults to 0.
  const Config adam = imported(R"({"optimizer": {"type": "Adam", "params": {"lr": 1e-4}}})");
  EXPECT_EQ(adam.optimizer().type(), config::OptimizerConfig::ADAMW);
  EXPECT_EQ(adam.optimizer().weight_decay(), 0.0);
  EXPECT_EQ(adam.sharding().strategy(), config::ShardingConfig::NO_SHARD);  // no zero_optimization: stage 0
  const Config l2 = imported(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})");
  EXPECT_EQ(l2.optimizer().type(), config::OptimizerConfig::ADAM);
  // The global batch from the micro-batch: micro x accumulation x world size.
  const Config micro = imported(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2})", 4);
  EXPECT_EQ(micro.train().batch_size(), 24);
  EXPECT_EQ(micro.train().micro_batches(), 2);
  const Config derived = imported(R"({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 3})", 4);
  EXPECT_EQ(derived.train().micro_batches(), 4);
  // fp16 with DeepSpeed's loss-scale defaults (window 1000, hysteresis 2, 2^16).
  const Config fp16 = imported(R"({"fp16": {"enabled": true, "loss_scale": 0}, "zero_optimization": {"stage": 2}})");
  EXPECT_EQ(fp16.sharding().strategy(), config::ShardingConfig::SHARD_GRAD_OP);
  EXPECT_EQ(fp16.precision().param_dtype(), config::PrecisionConfig::FP16);
  EXPECT_EQ(fp16.precision().loss_scale().mode(), config::LossScaleConfig::DYNAMIC);
  EXPECT_EQ(fp16.precision().loss_scale().initial_scale(), 65536.0);
  EXPECT_EQ(fp16.precision().loss_scale().growth_interval(), 1000);
  EXPECT_EQ(fp16.precision().loss_scale().hysteresis(), 2);
  const Config fixed = imported(R"({"fp16": {"enabled": true, "loss_scale": 128}})");
  EXPECT_EQ(fixed.precision().loss_scale().mode(), config::LossScaleConfig::STATIC);
  EXPECT_EQ(fixed.precision().loss_scale().initial_scale(), 128.0);
  const Config cosine = imported(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 500,
      "warmup_num_steps": 50, "cos_min_ratio": 0.1, "warmup_type": "linear"}}})");
  EXPECT_EQ(cosine.scheduler().type(), config::SchedulerConfig::COSINE);
  EXPECT_EQ(cosine.scheduler().min_lr_ratio(), 0.1);
  EXPECT_EQ(cosine.scheduler().total_steps(), 500);
  // ZeRO++'s quantized weights: int8 parameter gathers.
  const Config qw = imported(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true}})");
  EXPECT_EQ(qw.sharding().gather_quantization(), config::GatherQuantization::INT8);
  EXPECT_EQ(imported(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": false}})")
                .sharding()
                .gather_quantization(),
            config::GatherQuantization::NONE);
  // ZeRO++'s quantized gradients: int8 reduce-scatters (DeepSpeed's travel as int4).
  const Config qg = imported(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})");
  EXPECT_EQ(qg.sharding().reduce_quantization(), config::ReduceQuantization::INT8);
  EXPECT_EQ(qg.sharding().gather_quantization(), config::GatherQuantization::NONE);
  EXPECT_EQ(imported(R"({"zero_optimization": {"stage": 3, "zero_quantized_gradients": false}})")
                .sharding()
                .reduce_quantization(),
            config::ReduceQuantization::NONE);
  // ZeRO++'s secondary partition (hpZ): backward gathers inside groups of that many ranks.
  EXPECT_EQ(imported(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})").sharding().hpz_group_size(), 8);
  EXPECT_EQ(imported(R"({"zero_optimization": {"stage": 2, "zero_hpz_partition_size": 1}})").sharding().hpz_group_size(), 1);
}

TEST(DeepSpeedConfig, WhatHasNoMeaningHereIsRefusedWithItsKey) {
  const std::string tail = " (docs/deepspeed.md lists the keys zeroshard reads)";
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 1}})"),
            "ds.json: DeepSpeed key 'zero_optimization.stage': ZeRO stage 1 (optimizer state sharded, gradients "
            "replicated) has no zeroshard equivalent; stage 2 (SHARD_GRAD_OP) shards the gradients too and needs no "
            "more memory" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8}})"),
            "ds.json: DeepSpeed key 'zero_optimization.reduce_bucket_size': has no zeroshard equivalent (zeroshard "
            "gathers and reduces one unit, a wrapped block, at a time, and sharding.limit_all_gathers caps the "
            "gathers in flight); remove it or set it to \"auto\"" + tail);
  EXPECT_EQ(refusal(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})"),
            "ds.json: DeepSpeed key 'optimizer.params.lr': \"auto\" is filled in by Hugging Face's Trainer, which is "
            "not in the loop here; give the value" + tail);
  EXPECT_EQ(refusal(R"({"optimizer": {"type": "OneBitAdam"}})"),
            "ds.json: DeepSpeed key 'optimizer.type': 'OneBitAdam' is not one zeroshard runs; supported: Adam, AdamW, "
            "SGD" + tail);
  EXPECT_EQ(refusal(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})"),
            "ds.json: DeepSpeed key 'scheduler.params.warmup_type': is log (DeepSpeed's default); zeroshard warms "
            "up linearly: set warmup_type to linear" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 0, "zero_quantized_weights": true}})"),
            "ds.json: DeepSpeed key 'zero_optimization.zero_quantized_weights': quantized weights need stage 2 or 3 "
            "(stage 0 gathers no parameters)" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 0, "zero_quantized_gradients": true}})"),
            "ds.json: DeepSpeed key 'zero_optimization.zero_quantized_gradients': quantized gradients need stage 2 or "
            "3 (stage 0 all-reduces its gradients exactly)" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 2, "zero_hpz_partition_size": 4}})"),
            "ds.json: DeepSpeed key 'zero_optimization.zero_hpz_partition_size': a secondary partition needs stage 3 "
            "(parameters gathered for backward)" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}})"),
            "ds.json: DeepSpeed key 'zero_optimization.zero_hpz_partition_size': expected 1 or more ranks, got 0" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})"),
            "ds.json: DeepSpeed key 'zero_optimization.overlap_comm': only true has a meaning here: gathers and "
            "reductions always run beside compute" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})"),
            "ds.json: DeepSpeed key 'zero_optimization.offload_param': parameter offload needs stage 3, as in "
            "DeepSpeed" + tail);
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/a"}, "offload_param": {"device": "nvme", "nvme_path": "/b"}}})"),
            "ds.json: DeepSpeed key 'zero_optimization.offload_param.nvme_path': '/b' differs from the optimizer's "
            "'/a'; zeroshard keeps both under one offload.nvme_path" + tail);
  EXPECT_EQ(refusal(R"({"train_batch_size": 50, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})"),
            "ds.json: DeepSpeed key 'train_batch_size': = 50 but train_micro_batch_size_per_gpu x "
            "gradient_accumulation_steps x world size = 4 x 2 x 4 = 32" + tail);
  EXPECT_EQ(refusal(R"({"train_micro_batch_size_per_gpu": 4})", 0),
            "ds.json: DeepSpeed key 'train_micro_batch_size_per_gpu': the global batch is micro x accumulation x "
            "world size, and the launcher does not say the world size: give train_batch_size" + tail);
  EXPECT_TRUE(contains(refusal(R"({"flops_profiler": {"enabled": false}})"),
                       "ds.json: DeepSpeed key 'flops_profiler': has no zeroshard equivalent; keys read here: "
                       "train_batch_size, "));
  EXPECT_TRUE(contains(refusal("{\"bf16\": "), "ds.json: not valid JSON: "));
  EXPECT_EQ(refusal(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})"),
            "ds.json: DeepSpeed key 'fp16.enabled': bf16.enabled is true as well; choose one" + tail);
}

// On a command line: the file's keys after --config and before --set, and a broken rule says which
// DeepSpeed key set the value.
TEST(DeepSpeedConfig, CommandLinePrecedenceAndOrigins) {
  std::filesystem::create_directories(ZS_TEST_TMPDIR);
  const std::string path = std::string(ZS_TEST_TMPDIR) + "/ds_config_test.json";
  {
    std::ofstream f(path);
    f << R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})";
  }
  const char* argv[] = {"prog", "--deepspeed", path.c_str(), "--set", "offload.nvme_path=/scratch", "--set",
                        "train.batch_size=16", "rest"};
  const CommandLine cl = parse_command_line(8, argv);
  EXPECT_EQ(cl.deepspeed_path, path);
  ConfigOrigin origin;
  const Config c = build_config(cl, &origin);
  EXPECT_EQ(c.train().batch_size(), 16);  // --set wins
  EXPECT_EQ(c.offload().optimizer(), config::OffloadConfig::NVME);
  EXPECT_EQ(origin.of("sharding.strategy"), "DeepSpeed config " + path + " (zero_optimization.stage)");
  EXPECT_EQ(origin.of("train.batch_size"), "--set train.batch_size=16");
  const std::vector<std::string> keys = origin.set_keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "offload.optimizer"), keys.end());

  const char* bad[] = {"prog", "--deepspeed", path.c_str()};
  const std::string err = test::error_text_of<ConfigError>([&] { build_config(parse_command_line(3, bad)); });
  EXPECT_TRUE(contains(err, "offload.optimizer = NVME needs offload.nvme_path")) << err;
  EXPECT_TRUE(contains(err, "offload.optimizer from DeepSpeed config " + path +
                                " (zero_optimization.offload_optimizer.device)")) << err;
  const char* twice[] = {"prog", "--deepspeed", "a.json", "--deepspeed", "b.json"};
  const std::string again = test::error_text_of<UsageError>([&] { parse_command_line(5, twice); });
  EXPECT_TRUE(contains(again, "--deepspeed given twice ('a.json' and 'b.json')")) << again;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zeroshard
