// SPDX-License-Identifier: Apache-2.0
// DeepSpeed's ds_config.json as zeroshard config keys (deepspeed.h; the table: docs/deepspeed.md).

#include "zeroshard/config/deepspeed.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/launch_env.h"

namespace zeroshard {
namespace {

using Json = nlohmann::json;

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Importer {
 public:
  Importer(std::string source, int world_size) : source_(std::move(source)), world_(world_size) {}

  std::vector<DeepSpeedSetting> run(const Json& root) {
    if (!root.is_object()) fail("", "the file is not a JSON object");
    known(root, "", {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                     "gradient_clipping", "steps_per_print", "bf16", "fp16", "communication_data_type",
                     "zero_optimization", "optimizer", "scheduler", "tensorboard", "wall_clock_breakdown",
                     "zero_allow_untested_optimizer", "prescale_gradients", "gradient_predivide_factor"});
    batch(root);
    if (root.contains("gradient_clipping")) {
      set("gradient_clipping", "optimizer.grad_clip_norm=" + number_text(number(root, "gradient_clipping")));
    }
    if (root.contains("steps_per_print")) {
      set("steps_per_print", "train.log_interval=" + std::to_string(integer(root, "steps_per_print")));
    }
    precision(root);
    zero(root.contains("zero_optimization") ? root.at("zero_optimization") : Json::object());
    if (root.contains("optimizer")) optimizer(root.at("optimizer"));
    if (root.contains("scheduler")) scheduler(root.at("scheduler"));
    if (root.contains("tensorboard")) tensorboard(root.at("tensorboard"));
    only(root, "wall_clock_breakdown", false, "per-phase timings are in the metrics (--metrics-out) and the logs");
    only(root, "prescale_gradients", false, "gradients are averaged over the ranks once, in the reduction");
    if (root.contains("gradient_predivide_factor") && number(root, "gradient_predivide_factor") != 1.0) {
      fail("gradient_predivide_factor", "zeroshard averages gradients in the reduction; only 1.0 has a meaning here");
    }
    if (root.contains("zero_allow_untested_optimizer")) boolean(root, "zero_allow_untested_optimizer");
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    ZS_THROW(ConfigError, source_, ": DeepSpeed ", key.empty() ? std::string("config") : "key '" + key + "'", ": ",
             what, " (docs/deepspeed.md lists the keys zeroshard reads)");
  }

  void set(const std::string& key, const std::string& assignment) { out_.push_back({assignment, key}); }

  static std::string path(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
  }

  // Every key of `obj` is in `keys`; `prefix` is obj's own path.
  void known(const Json& obj, const std::string& prefix, std::initializer_list<const char*> keys) const {
    if (!obj.is_object()) fail(prefix, "expected an object");
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool found = false;
      for (const char* k : keys) found = found || it.key() == k;
      if (!found) {
        std::string list;
        for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(path(prefix, it.key()), "has no zeroshard equivalent; keys read here: " + list);
      }
    }
  }

  const Json& value(const Json& obj, const std::string& key, const std::string& full) const {
    const Json& v = obj.at(key);
    if (v.is_string() && v.get<std::string>() == "auto") {
      fail(full, "\"auto\" is filled in by Hugging Face's Trainer, which is not in the loop here; give the value");
    }
    return v;
  }
  double number(const Json& obj, const std::string& key, const std::string& prefix = "") const {
    const std::string full = path(prefix, key);
    const Json& v = value(obj, key, full);
    if (!v.is_number()) fail(full, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  int64_t integer(const Json& obj, const std::string& key, const std::string& prefix = "") const {
    const double d = number(obj, key, prefix);
    if (d != std::floor(d) || std::fabs(d) > 9e15) fail(path(prefix, key), "expected an integer, got " + number_text(d));
    return static_cast<int64_t>(d);
  }
  bool boolean(const Json& obj, const std::string& key, const std::string& prefix = "") const {
    const std::string full = path(prefix, key);
    const Json& v = value(obj, key, full);
    if (!v.is_boolean()) fail(full, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string text(const Json& obj, const std::string& key, const std::string& prefix = "") const {
    const std::string full = path(prefix, key);
    const Json& v = value(obj, key, full);
    if (!v.is_string()) fail(full, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  // A boolean key zeroshard honours only at `wanted` (what it always does).
  void only(const Json& obj, const std::string& key, bool wanted, const std::string& why,
            const std::string& prefix = "") const {
    if (obj.contains(key) && boolean(obj, key, prefix) != wanted) {
      fail(path(prefix, key), std::string("only ") + (wanted ? "true" : "false") + " has a meaning here: " + why);
    }
  }
  // A tuning knob of DeepSpeed's own bucketing: "auto" lets zeroshard decide, a number has no meaning.
  void knob(const Json& obj, const std::string& key, const std::string& prefix, const std::string& why) const {
    if (!obj.contains(key)) return;
    const Json& v = obj.at(key);
    if (v.is_string() && v.get<std::string>() == "auto") return;
    fail(path(prefix, key), "has no zeroshard equivalent (" + why + "); remove it or set it to \"auto\"");
  }

  void batch(const Json& root) {
    const bool has_global = root.contains("train_batch_size");
    const bool has_micro = root.contains("train_micro_batch_size_per_gpu");
    const bool has_accum = root.contains("gradient_accumulation_steps");
    const int64_t global = has_global ? integer(root, "train_batch_size") : 0;
    const int64_t micro = has_micro ? integer(root, "train_micro_batch_size_per_gpu") : 0;
    int64_t accum = has_accum ? integer(root, "gradient_accumulation_steps") : 0;
    if ((has_global && global < 1) || (has_micro && micro < 1) || (has_accum && accum < 1)) {
      fail(has_global && global < 1 ? "train_batch_size"
           : has_micro && micro < 1 ? "train_micro_batch_size_per_gpu"
                                    : "gradient_accumulation_steps",
           "must be at least 1");
    }
    if (has_micro && (!has_global || !has_accum)) {
      if (world_ <= 0) {
        fail("train_micro_batch_size_per_gpu", "the global batch is micro x accumulation x world size, and the "
             "launcher does not say the world size: give train_batch_size");
      }
      if (!has_accum) {
        accum = has_global ? global / (micro * world_) : 1;
        if (accum < 1 || accum * micro * world_ != global) {
          if (has_global) {
            fail("train_batch_size", "= " + std::to_string(global) + " is not train_micro_batch_size_per_gpu (" +
                 std::to_string(micro) + ") x " + std::to_string(world_) + " ranks x a whole number of accumulation steps");
          }
        }
      }
    }
    if (has_global && has_micro && world_ > 0 && global != micro * accum * world_) {
      fail("train_batch_size", "= " + std::to_string(global) + " but train_micro_batch_size_per_gpu x "
           "gradient_accumulation_steps x world size = " + std::to_string(micro) + " x " + std::to_string(accum) +
           " x " + std::to_string(world_) + " = " + std::to_string(micro * accum * world_));
    }
    if (has_global) {
      set("train_batch_size", "train.batch_size=" + std::to_string(global));
    } else if (has_micro) {
      set("train_micro_batch_size_per_gpu", "train.batch_size=" + std::to_string(micro * accum * world_));
    }
    if (has_accum || (has_micro && accum > 0)) {
      set(has_accum ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu",
          "train.micro_batches=" + std::to_string(accum));
    }
  }

  static const char* dtype_of(const std::string& ds) {
    const std::string d = lower(ds);
    if (d == "fp32" || d == "float32") return "FP32";
    if (d == "bf16" || d == "bfloat16") return "BF16";
    if (d == "fp16" || d == "float16") return "FP16";
    return nullptr;
  }

  void precision(const Json& root) {
    bool bf16 = false, fp16 = false;
    if (root.contains("bf16")) {
      known(root.at("bf16"), "bf16", {"enabled"});
      bf16 = root.at("bf16").contains("enabled") && boolean(root.at("bf16"), "enabled", "bf16");
    }
    if (root.contains("fp16")) {
      const Json& f = root.at("fp16");
      known(f, "fp16", {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                        "consecutive_hysteresis", "min_loss_scale", "auto_cast"});
      fp16 = f.contains("enabled") && boolean(f, "enabled", "fp16");
    }
    if (bf16 && fp16) fail("fp16.enabled", "bf16.enabled is true as well; choose one");
    const char* compute = bf16 ? "BF16" : fp16 ? "FP16" : nullptr;
    if (compute != nullptr) {
      set(bf16 ? "bf16.enabled" : "fp16.enabled", std::string("precision.param_dtype=") + compute);
      set(bf16 ? "bf16.enabled" : "fp16.enabled", std::string("precision.reduce_dtype=") + compute);
    }
    if (root.contains("communication_data_type")) {
      const char* d = dtype_of(text(root, "communication_data_type"));
      if (d == nullptr) fail("communication_data_type", "expected fp32, bf16 or fp16");
      set("communication_data_type", std::string("precision.reduce_dtype=") + d);
    }
    if (fp16) loss_scale(root.at("fp16"));
  }

  // DeepSpeed's defaults where the file leaves a key out: they are what its run used.
  void loss_scale(const Json& f) {
    const double fixed = f.contains("loss_scale") ? number(f, "loss_scale", "fp16") : 0;
    if (fixed < 0) fail("fp16.loss_scale", "must be 0 (dynamic) or a positive fixed scale");
    if (fixed > 0) {
      set("fp16.loss_scale", "precision.loss_scale.mode=STATIC");
      set("fp16.loss_scale", "precision.loss_scale.initial_scale=" + number_text(fixed));
      return;
    }
    const int64_t power = f.contains("initial_scale_power") ? integer(f, "initial_scale_power", "fp16") : 16;
    if (power < 0 || power > 99) fail("fp16.initial_scale_power", "expected 0 to 99");
    set("fp16.loss_scale", "precision.loss_scale.mode=DYNAMIC");
    set("fp16.initial_scale_power", "precision.loss_scale.initial_scale=" + number_text(std::ldexp(1.0, static_cast<int>(power))));
    set("fp16.loss_scale_window", "precision.loss_scale.growth_interval=" +
        std::to_string(f.contains("loss_scale_window") ? integer(f, "loss_scale_window", "fp16") : 1000));
    set("fp16.hysteresis", "precision.loss_scale.hysteresis=" +
        std::to_string(f.contains("hysteresis") ? integer(f, "hysteresis", "fp16") : 2));
    set("fp16.min_loss_scale", "precision.loss_scale.min_scale=" +
        number_text(f.contains("min_loss_scale") ? number(f, "min_loss_scale", "fp16") : 1));
    set("fp16.loss_scale", "precision.loss_scale.growth_factor=2");
    set("fp16.loss_scale", "precision.loss_scale.backoff_factor=0.5");
    if (f.contains("consecutive_hysteresis")) boolean(f, "consecutive_hysteresis", "fp16");
    if (f.contains("auto_cast")) {
      set("fp16.auto_cast", std::string("precision.cast_forward_inputs=") +
          (boolean(f, "auto_cast", "fp16") ? "true" : "false"));
    }
  }

  void zero(const Json& z) {
    const std::string p = "zero_optimization";
    known(z, p, {"stage", "offload_optimizer", "offload_param", "overlap_comm", "contiguous_gradients",
                 "reduce_scatter", "allgather_partitions", "round_robin_gradients", "reduce_bucket_size",
                 "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                 "stage3_max_live_parameters", "stage3_max_reuse_distance", "sub_group_size",
                 "stage3_gather_16bit_weights_on_model_save", "zero_quantized_weights",
                 "zero_quantized_gradients", "zero_hpz_partition_size"});
    const int64_t stage = z.contains("stage") ? integer(z, "stage", p) : 0;
    if (stage == 1) {
      fail(p + ".stage", "ZeRO stage 1 (optimizer state sharded, gradients replicated) has no zeroshard "
           "equivalent; stage 2 (SHARD_GRAD_OP) shards the gradients too and needs no more memory");
    }
    if (stage < 0 || stage > 3) fail(p + ".stage", "expected 0, 2 or 3, got " + std::to_string(stage));
    set(p + ".stage", std::string("sharding.strategy=") + (stage == 3 ? "FULL_SHARD" : stage == 2 ? "SHARD_GRAD_OP" : "NO_SHARD"));
    std::string nvme;
    if (z.contains("offload_optimizer")) offload(z.at("offload_optimizer"), p + ".offload_optimizer", "optimizer", &nvme);
    if (z.contains("offload_param")) {
      const bool placed = offload(z.at("offload_param"), p + ".offload_param", "params", &nvme);
      if (placed && stage != 3) fail(p + ".offload_param", "parameter offload needs stage 3, as in DeepSpeed");
    }
    if (z.contains("zero_quantized_weights") && boolean(z, "zero_quantized_weights", p)) {
      if (stage == 0) fail(p + ".zero_quantized_weights", "quantized weights need stage 2 or 3 (stage 0 gathers no parameters)");
      set(p + ".zero_quantized_weights", "sharding.gather_quantization=INT8");
    }
    if (z.contains("zero_quantized_gradients") && boolean(z, "zero_quantized_gradients", p)) {
      if (stage == 0) {
        fail(p + ".zero_quantized_gradients",
             "quantized gradients need stage 2 or 3 (stage 0 all-reduces its gradients exactly)");
      }
      set(p + ".zero_quantized_gradients", "sharding.reduce_quantization=INT8");
    }
    if (z.contains("zero_hpz_partition_size")) {
      const int64_t hpz = integer(z, "zero_hpz_partition_size", p);
      if (hpz < 1) fail(p + ".zero_hpz_partition_size", "expected 1 or more ranks, got " + std::to_string(hpz));
      if (hpz > 1 && stage != 3) {
        fail(p + ".zero_hpz_partition_size", "a secondary partition needs stage 3 (parameters gathered for backward)");
      }
      set(p + ".zero_hpz_partition_size", "sharding.hpz_group_size=" + std::to_string(hpz));
    }
    only(z, "overlap_comm", true, "gathers and reductions always run beside compute", p);
    only(z, "contiguous_gradients", true, "each unit's gradients are one contiguous buffer", p);
    only(z, "reduce_scatter", true, "gradients are always reduce-scattered", p);
    only(z, "allgather_partitions", true, "parameters are always all-gathered", p);
    only(z, "round_robin_gradients", false, "each rank reduces its own shard of every unit", p);
    only(z, "stage3_gather_16bit_weights_on_model_save", false,
         "a checkpoint stays sharded; `zeroshard-ckpt export` writes the consolidated weights", p);
    const std::string units = "zeroshard gathers and reduces one unit, a wrapped block, at a time, and "
                              "sharding.limit_all_gathers caps the gathers in flight";
    for (const char* k : {"reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                          "stage3_max_live_parameters", "stage3_max_reuse_distance"}) {
      knob(z, k, p, units);
    }
    knob(z, "stage3_param_persistence_threshold", p, "every unit is resharded after use; NO_SHARD keeps all");
    knob(z, "sub_group_size", p, "the optimizer steps one unit's shard at a time");
  }

  // Returns whether the device is cpu or nvme.
  bool offload(const Json& o, const std::string& p, const char* target, std::string* nvme) {
    known(o, p, {"device", "nvme_path", "pin_memory", "buffer_count", "fast_init", "ratio", "buffer_size", "max_in_cpu"});
    const std::string device = o.contains("device") ? lower(text(o, "device", p)) : "none";
    if (device != "none" && device != "cpu" && device != "nvme") fail(p + ".device", "expected none, cpu or nvme");
    if (device != "none") set(p + ".device", std::string("offload.") + target + "=" + (device == "cpu" ? "CPU" : "NVME"));
    if (o.contains("nvme_path") && device == "nvme") {
      const std::string path = text(o, "nvme_path", p);
      if (!nvme->empty() && *nvme != path) {
        fail(p + ".nvme_path", "'" + path + "' differs from the optimizer's '" + *nvme +
             "'; zeroshard keeps both under one offload.nvme_path");
      }
      *nvme = path;
      set(p + ".nvme_path", "offload.nvme_path=" + path);
    }
    if (o.contains("pin_memory")) {
      set(p + ".pin_memory", std::string("offload.pin_memory=") + (boolean(o, "pin_memory", p) ? "true" : "false"));
    }
    if (o.contains("buffer_count")) {
      set(p + ".buffer_count", "offload.buffer_count=" + std::to_string(integer(o, "buffer_count", p)));
    }
    if (o.contains("fast_init")) boolean(o, "fast_init", p);  // how DeepSpeed fills its files; nothing to set
    if (o.contains("ratio") && number(o, "ratio", p) != 1.0) {
      fail(p + ".ratio", "a partial offload has no zeroshard equivalent; only 1.0 (all of it)");
    }
    knob(o, "buffer_size", p, "offloaded shards move one unit at a time");
    knob(o, "max_in_cpu", p, "offloaded shards move one unit at a time");
    return device != "none";
  }

  void optimizer(const Json& o) {
    known(o, "optimizer", {"type", "params"});
    const std::string type = o.contains("type") ? lower(text(o, "type", "optimizer")) : "";
    const Json params = o.contains("params") ? o.at("params") : Json::object();
    known(params, "optimizer.params", {"lr", "betas", "eps", "weight_decay", "momentum", "nesterov", "adam_w_mode",
                                       "torch_adam", "bias_correction", "amsgrad", "dampening"});
    const std::string p = "optimizer.params";
    std::string ours;
    if (type == "adam" || type == "adamw") {
      const bool decoupled = params.contains("adam_w_mode") ? boolean(params, "adam_w_mode", p) : true;
      if (type == "adamw" && !decoupled) fail(p + ".adam_w_mode", "AdamW with adam_w_mode false is Adam: say type Adam");
      ours = decoupled ? "ADAMW" : "ADAM";
    } else if (type == "sgd") {
      ours = "SGD";
    } else {
      fail("optimizer.type", "'" + (o.contains("type") ? text(o, "type", "optimizer") : std::string()) +
           "' is not one zeroshard runs; supported: Adam, AdamW, SGD");
    }
    set("optimizer.type", "optimizer.type=" + ours);
    if (params.contains("lr")) set(p + ".lr", "optimizer.lr=" + number_text(number(params, "lr", p)));
    if (params.contains("betas")) {
      const Json& b = value(params, "betas", p + ".betas");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number()) fail(p + ".betas", "expected [beta1, beta2]");
      set(p + ".betas", "optimizer.beta1=" + number_text(b[0].get<double>()));
      set(p + ".betas", "optimizer.beta2=" + number_text(b[1].get<double>()));
    }
    if (params.contains("eps")) set(p + ".eps", "optimizer.eps=" + number_text(number(params, "eps", p)));
    // torch's default, which DeepSpeed's optimizers keep; zeroshard's own default is 0.01.
    set(p + ".weight_decay", "optimizer.weight_decay=" +
        number_text(params.contains("weight_decay") ? number(params, "weight_decay", p) : 0.0));
    if (ours == "SGD") {
      if (params.contains("momentum")) set(p + ".momentum", "optimizer.momentum=" + number_text(number(params, "momentum", p)));
      if (params.contains("nesterov")) {
        set(p + ".nesterov", std::string("optimizer.nesterov=") + (boolean(params, "nesterov", p) ? "true" : "false"));
      }
      if (params.contains("dampening") && number(params, "dampening", p) != 0) fail(p + ".dampening", "only 0 is supported");
    } else {
      for (const char* k : {"momentum", "nesterov", "dampening"}) {
        if (params.contains(k)) fail(path(p, k), "applies to SGD, not Adam");
      }
    }
    if (params.contains("torch_adam")) boolean(params, "torch_adam", p);  // which kernel DeepSpeed uses; same math
    only(params, "bias_correction", true, "Adam always corrects the moments' bias", p);
    only(params, "amsgrad", false, "AMSGrad is not implemented", p);
  }

  void scheduler(const Json& s) {
    known(s, "scheduler", {"type", "params"});
    const std::string type = s.contains("type") ? text(s, "type", "scheduler") : "";
    const Json params = s.contains("params") ? s.at("params") : Json::object();
    const std::string p = "scheduler.params";
    if (type != "WarmupLR" && type != "WarmupDecayLR" && type != "WarmupCosineLR") {
      fail("scheduler.type", "'" + type + "' is not one zeroshard runs; supported: WarmupLR, WarmupDecayLR, WarmupCosineLR");
    }
    const bool cosine = type == "WarmupCosineLR";
    if (cosine) {
      known(params, p, {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
                        "last_batch_iteration"});
    } else {
      known(params, p, {"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
                        "last_batch_iteration"});
    }
    const std::string warmup = params.contains("warmup_type") ? text(params, "warmup_type", p) : "log";
    if (warmup != "linear") {
      fail(p + ".warmup_type", "is " + warmup + (params.contains("warmup_type") ? "" : " (DeepSpeed's default)") +
           "; zeroshard warms up linearly: set warmup_type to linear");
    }
    if (params.contains("last_batch_iteration") && integer(params, "last_batch_iteration", p) != -1) {
      fail(p + ".last_batch_iteration", "a resumed schedule comes from the checkpoint (--resume), not from the config");
    }
    const char* floor_key = cosine ? "warmup_min_ratio" : "warmup_min_lr";
    if (params.contains(floor_key) && number(params, floor_key, p) != 0) {
      fail(path(p, floor_key), "the warmup starts at 0 here; only 0 is supported");
    }
    set("scheduler.type", std::string("scheduler.type=") + (cosine ? "COSINE" : type == "WarmupDecayLR" ? "LINEAR_WARMUP" : "CONSTANT"));
    set(p + ".warmup_num_steps", "scheduler.warmup_steps=" +
        std::to_string(params.contains("warmup_num_steps") ? integer(params, "warmup_num_steps", p) : 1000));
    if (!cosine && params.contains("warmup_max_lr")) {
      set(p + ".warmup_max_lr", "optimizer.lr=" + number_text(number(params, "warmup_max_lr", p)));
    }
    if (type != "WarmupLR") {
      if (!params.contains("total_num_steps")) fail(p + ".total_num_steps", "is required by " + type);
      set(p + ".total_num_steps", "scheduler.total_steps=" + std::to_string(integer(params, "total_num_steps", p)));
      set(p + ".total_num_steps", "scheduler.min_lr_ratio=" +
          number_text(cosine && params.contains("cos_min_ratio") ? number(params, "cos_min_ratio", p) : 0.0));
    }
  }

  void tensorboard(const Json& t) {
    known(t, "tensorboard", {"enabled", "output_path", "job_name"});
    if (!(t.contains("enabled") && boolean(t, "enabled", "tensorboard"))) return;
    std::string dir = t.contains("output_path") ? text(t, "output_path", "tensorboard") : "";
    const std::string job = t.contains("job_name") ? text(t, "job_name", "tensorboard") : "DeepSpeedJobName";
    dir = (dir.empty() ? std::string() : dir + (dir.back() == '/' ? "" : "/")) + job;
    set("tensorboard.output_path", "logging.tensorboard_dir=" + dir);
  }

  std::string source_;
  int world_;
  std::vector<DeepSpeedSetting> out_;
};

}  // namespace

std::vector<DeepSpeedSetting> deepspeed_settings(const std::string& json, const std::string& source, int world_size) {
  Json root;
  try {
    root = Json::parse(json);
  } catch (const Json::exception& e) {  // a syntax error, or a number out of range ("1e999")
    ZS_THROW(ConfigError, source, ": not valid JSON: ", e.what());
  }
  return Importer(source, world_size).run(root);
}

std::vector<DeepSpeedSetting> load_deepspeed_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), ConfigError, "--deepspeed '", path, "': cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return deepspeed_settings(text.str(), path, detect_launch_env().world_size);
}

}  // namespace zeroshard
