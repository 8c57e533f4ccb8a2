// SPDX-License-Identifier: Apache-2.0
// The rules between config keys (docs/config.md, "Rules between keys"), the entries of lists and
// the keys with a format of their own: the one place each rule is written. Every violated rule is
// collected (not only the first), each with the paths of the keys it involves, so build_config can
// say where each value came from. The layers below check the plain structs resolve() makes from a
// valid config only to protect themselves (UsageError naming the struct's fields).

#include <cmath>
#include <string>
#include <vector>

#include "config_rules.h"
#include "schema_text.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard::config_rules {
namespace {

using schema_text::format_value;

namespace opt = ::zeroshard::config;
using Problems = std::vector<ConfigProblem>;
using Target = opt::OffloadConfig;

void add(Problems* out, std::vector<std::string> paths, std::string message) {
  out->push_back({std::move(paths), std::move(message)});
}

void check_device(const Config& c, Problems* out) {
  if (c.comm().backend() == opt::CommConfig::NCCL && c.runtime().device() == opt::RuntimeConfig::CPU) {
    add(out, {"comm.backend", "runtime.device"},
        "comm.backend = NCCL needs a GPU, but runtime.device = CPU; allowed: comm.backend MPI or AUTO with a CPU "
        "device, or runtime.device CUDA/AUTO");
  }
}

void check_offload(const Config& c, Problems* out) {
  const Target& o = c.offload();
  const std::pair<const char*, Target::Target> placed[] = {
      {"optimizer", o.optimizer()}, {"params", o.params()}, {"grads", o.grads()}};
  for (const auto& [which, target] : placed) {
    if (target == Target::NVME && o.nvme_path().empty()) {
      add(out, {std::string("offload.") + which, "offload.nvme_path"},
          std::string("offload.") + which + " = NVME needs offload.nvme_path (a directory on the NVMe drive), but it is empty");
    }
  }
  if (o.params() != Target::DEVICE && o.optimizer() == Target::DEVICE) {
    add(out, {"offload.params", "offload.optimizer"},
        std::string("offload.params = ") + Target::Target_Name(o.params()) +
            " needs offload.optimizer = CPU or NVME (the fp32 master and moments live with the offloaded optimizer, "
            "whose step streams the parameter shards), but offload.optimizer = DEVICE");
  }
  if (o.grads() != Target::DEVICE && o.optimizer() == Target::DEVICE) {
    add(out, {"offload.grads", "offload.optimizer"},
        std::string("offload.grads = ") + Target::Target_Name(o.grads()) +
            " needs offload.optimizer = CPU or NVME (the offloaded optimizer's step brings each gradient shard in "
            "with its parameters), but offload.optimizer = DEVICE");
  }
}

void check_param_dtype_copy(const Config& c, Problems* out) {
  if (!c.offload().keep_param_dtype_shard()) return;
  if (c.offload().params() == Target::DEVICE) {
    add(out, {"offload.keep_param_dtype_shard", "offload.params"},
        "offload.keep_param_dtype_shard = true needs offload.params = CPU or NVME (it keeps a param_dtype copy "
        "beside an offloaded fp32 shard), but offload.params = DEVICE");
  }
  const auto& p = c.precision();
  if (p.param_dtype() == opt::PrecisionConfig::FP32 || p.autocast()) {
    add(out, {"offload.keep_param_dtype_shard", "precision.param_dtype"},
        "offload.keep_param_dtype_shard = true needs precision.param_dtype = BF16 or FP16 without precision.autocast "
        "(the copy is the shard in the dtype units compute in), but precision.param_dtype = " +
            opt::PrecisionConfig::DType_Name(p.param_dtype()) + (p.autocast() ? " with precision.autocast = true" : ""));
  }
}

// fp16 in the gathered parameters or the reduction: what loss_scale.mode = AUTO resolves by.
bool uses_fp16(const opt::PrecisionConfig& p) {
  return p.param_dtype() == opt::PrecisionConfig::FP16 || p.reduce_dtype() == opt::PrecisionConfig::FP16;
}

void check_overlap_step(const Config& c, Problems* out) {
  const Target& o = c.offload();
  if (!o.overlap_step()) return;
  if (o.optimizer() != Target::CPU || o.params() != Target::DEVICE || o.grads() != Target::DEVICE) {
    add(out, {"offload.overlap_step", "offload.optimizer", "offload.params", "offload.grads"},
        std::string("offload.overlap_step = true needs offload.optimizer = CPU with offload.params and offload.grads "
                    "= DEVICE (the step during backward updates shards in memory from the host state), but "
                    "offload.optimizer = ") +
            Target::Target_Name(o.optimizer()) + ", offload.params = " + Target::Target_Name(o.params()) +
            ", offload.grads = " + Target::Target_Name(o.grads()));
  }
  const auto& s = c.precision().loss_scale();
  const bool scaling = s.mode() == opt::LossScaleConfig::DYNAMIC || s.mode() == opt::LossScaleConfig::STATIC ||
                       (s.mode() == opt::LossScaleConfig::AUTO && uses_fp16(c.precision()));
  if (scaling) {
    add(out, {"offload.overlap_step", "precision.loss_scale.mode"},
        "offload.overlap_step = true does not combine with loss scaling (precision.loss_scale.mode = " +
            opt::LossScaleConfig::Mode_Name(s.mode()) + (s.mode() == opt::LossScaleConfig::AUTO ? ", dynamic with FP16" : "") +
            "): unscaling changes every step's gradients after backward, so every step would be redone; use BF16, "
            "or turn overlap_step off");
  }
}

void check_precision(const Config& c, Problems* out) {
  const auto& p = c.precision();
  if (p.autocast() && p.param_dtype() == opt::PrecisionConfig::FP32) {
    add(out, {"precision.autocast", "precision.param_dtype"},
        "precision.autocast = true needs precision.param_dtype = BF16 or FP16 (the dtype forward runs in under "
        "autocast; the parameters stay fp32), but precision.param_dtype = FP32");
  }
  const auto& s = p.loss_scale();
  const bool dynamic = s.mode() == opt::LossScaleConfig::DYNAMIC || (s.mode() == opt::LossScaleConfig::AUTO && uses_fp16(p));
  if (dynamic && s.min_scale() > s.initial_scale()) {
    add(out, {"precision.loss_scale.min_scale", "precision.loss_scale.initial_scale", "precision.loss_scale.mode"},
        "precision.loss_scale.min_scale = " + format_value(s.min_scale()) +
            " exceeds precision.loss_scale.initial_scale = " + format_value(s.initial_scale()) +
            " with a dynamic loss scale (precision.loss_scale.mode = " + opt::LossScaleConfig::Mode_Name(s.mode()) +
            (s.mode() == opt::LossScaleConfig::AUTO ? ", dynamic with FP16" : "") +
            "): the scale starts at initial_scale and never backs off below min_scale");
  }
  if (p.frozen_linear() == opt::PrecisionConfig::NF4 && c.lora().rank() == 0) {
    add(out, {"precision.frozen_linear", "lora.rank"},
        "precision.frozen_linear = NF4 needs lora.rank > 0 (only frozen Linear weights are stored in NF4, and "
        "without LoRA every weight trains), but lora.rank = 0");
  }
}

void check_sharding(const Config& c, Problems* out) {
  const auto& s = c.sharding();
  if (s.auto_wrap_policy() == opt::AutoWrap::MODULE_TYPE && s.auto_wrap_module_types().find_first_not_of(" \t,") ==
                                                                 std::string::npos) {
    add(out, {"sharding.auto_wrap_policy", "sharding.auto_wrap_module_types"},
        "sharding.auto_wrap_policy = MODULE_TYPE needs sharding.auto_wrap_module_types (the module types to wrap, "
        "e.g. \"torch::nn::Linear,GptBlock\"), but it is empty");
  }
  if (s.gather_quantization() != opt::GatherQuantization::NONE && s.strategy() == opt::ShardingConfig::NO_SHARD) {
    add(out, {"sharding.gather_quantization", "sharding.strategy"},
        "sharding.gather_quantization = INT8 quantizes the parameter all-gathers, but sharding.strategy = NO_SHARD "
        "gathers none (every rank keeps every parameter)");
  }
  if (s.reduce_quantization() != opt::ReduceQuantization::NONE && s.strategy() == opt::ShardingConfig::NO_SHARD) {
    add(out, {"sharding.reduce_quantization", "sharding.strategy"},
        "sharding.reduce_quantization = INT8 quantizes the gradient reduce-scatters, but sharding.strategy = NO_SHARD "
        "reduce-scatters none (its gradients are all-reduced exactly)");
  }
}

void check_scheduler(const Config& c, Problems* out) {
  const auto& s = c.scheduler();
  if (s.type() == opt::SchedulerConfig::COSINE && s.total_steps() == 0) {
    add(out, {"scheduler.type", "scheduler.total_steps"},
        "scheduler.type = COSINE needs scheduler.total_steps > 0 (the step where the decay ends)");
  } else if (s.total_steps() > 0 && s.total_steps() <= s.warmup_steps()) {
    add(out, {"scheduler.total_steps", "scheduler.warmup_steps"},
        detail::concat("scheduler.total_steps = ", s.total_steps(), " must exceed scheduler.warmup_steps = ",
                       s.warmup_steps()));
  }
  if (s.type() == opt::SchedulerConfig::LINEAR_WARMUP && s.total_steps() == 0 && s.min_lr_ratio() > 0) {
    add(out, {"scheduler.min_lr_ratio", "scheduler.total_steps", "scheduler.type"},
        "scheduler.min_lr_ratio = " + format_value(s.min_lr_ratio()) +
            " needs scheduler.total_steps > 0 with scheduler.type = LINEAR_WARMUP (without total_steps the lr "
            "stays constant after the warmup and never reaches the minimum)");
  }
}

void check_optimizer(const Config& c, Problems* out) {
  const auto& o = c.optimizer();
  if (o.nesterov() && o.momentum() <= 0) {
    add(out, {"optimizer.nesterov", "optimizer.momentum"}, "optimizer.nesterov = true needs optimizer.momentum > 0");
  }
  if (o.type() != opt::OptimizerConfig::SGD) {
    const std::string type = opt::OptimizerConfig::Type_Name(o.type());
    if (o.momentum() != 0) {
      add(out, {"optimizer.momentum", "optimizer.type"},
          "optimizer.momentum = " + format_value(o.momentum()) + " applies only to optimizer.type = SGD, but "
          "optimizer.type = " + type + "; remove it or use SGD");
    }
    if (o.nesterov()) {
      add(out, {"optimizer.nesterov", "optimizer.type"},
          "optimizer.nesterov = true applies only to optimizer.type = SGD, but optimizer.type = " + type +
              "; remove it or use SGD");
    }
  }
}

// optimizer.param_groups: a list, so its entries are checked here rather than by the schema's ranges.
void check_param_groups(const Config& c, Problems* out) {
  for (int i = 0; i < c.optimizer().param_groups_size(); ++i) {
    const auto& g = c.optimizer().param_groups(i);
    const std::string at = detail::concat("optimizer.param_groups[", i, "]");
    if (g.match().empty()) {
      add(out, {"optimizer.param_groups"},
          at + ".match is empty; give a glob over parameter names, e.g. '*.bias' or 'blocks.*.attn.*'");
    }
    if (g.has_weight_decay() && !(std::isfinite(g.weight_decay()) && g.weight_decay() >= 0)) {
      add(out, {"optimizer.param_groups"},
          at + ".weight_decay = " + format_value(g.weight_decay()) + " is out of range; allowed: >= 0");
    }
    if (!(std::isfinite(g.lr_scale()) && g.lr_scale() >= 0)) {
      add(out, {"optimizer.param_groups"},
          at + ".lr_scale = " + format_value(g.lr_scale()) + " is out of range; allowed: >= 0");
    }
  }
}

void check_model(const Config& c, Problems* out) {
  const auto& m = c.model();
  if (m.n_head() > 0 && m.d_model() % m.n_head() != 0) {
    add(out, {"model.d_model", "model.n_head"},
        detail::concat("model.d_model = ", m.d_model(), " must be a multiple of model.n_head = ", m.n_head(),
                       " (each head gets d_model / n_head features)"));
  }
  // model.init_rename: comma-separated file_name=model_name pairs (resolve.cpp splits them).
  const std::string& text = m.init_rename();
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      add(out, {"model.init_rename"}, "model.init_rename = '" + text + "': '" + item +
                                          "' is not file_name=model_name (pairs are separated by commas)");
      return;
    }
    pos = end + 1;
  }
}

void check_checkpoint(const Config& c, Problems* out) {
  if (c.checkpoint().interval_steps() > 0 && c.checkpoint().dir().empty()) {
    add(out, {"checkpoint.interval_steps", "checkpoint.dir"},
        detail::concat("checkpoint.interval_steps = ", c.checkpoint().interval_steps(),
                       " needs checkpoint.dir, but it is empty"));
  }
  if (c.checkpoint().async_save() && c.offload().optimizer() == Target::NVME) {
    add(out, {"checkpoint.async_save", "offload.optimizer"},
        "checkpoint.async_save = true needs the optimizer state in memory (an async save copies it whole before "
        "writing), but offload.optimizer = NVME; a synchronous save streams it from the drive shard by shard");
  }
}

// String keys with a fixed vocabulary: the logger's own parsers, so the rules cannot drift.
void check_logging(const Config& c, Problems* out) {
  try {
    parse_log_level(c.logging().level(), "logging.level");
  } catch (const ConfigError& e) {
    add(out, {"logging.level"}, e.message());
  }
  try {
    parse_log_ranks(c.logging().ranks(), LogSettings{}, "logging.ranks");
  } catch (const ConfigError& e) {
    add(out, {"logging.ranks"}, e.message());
  }
}

}  // namespace

// Keys that only mean something under another key's value: set without it they would be ignored.
void check_dependent_keys(const Config& c, Problems* out) {
  const auto& ac = c.activation_checkpointing();
  if (ac.every_n_blocks() != 1 && !ac.enabled()) {
    add(out, {"activation_checkpointing.every_n_blocks", "activation_checkpointing.enabled"},
        detail::concat("activation_checkpointing.every_n_blocks = ", ac.every_n_blocks(),
                       " applies only with activation_checkpointing.enabled = true; enable it or remove the key"));
  }
  const auto& l = c.lora();
  if (l.rank() == 0) {
    const opt::LoraConfig defaults;
    std::vector<std::string> set;
    if (l.alpha() != defaults.alpha()) set.push_back("lora.alpha");
    if (l.dropout() != defaults.dropout()) set.push_back("lora.dropout");
    if (!l.targets().empty()) set.push_back("lora.targets");
    for (const std::string& key : set) {
      add(out, {key, "lora.rank"}, key + " applies only with LoRA adapters (lora.rank > 0), but lora.rank = 0; set "
                                         "lora.rank or remove the key");
    }
  }
  const auto& sh = c.sharding();
  const opt::ShardingConfig sharding_defaults;
  // A quantization block set while its quantization is NONE.
  auto unused_block = [&](bool off, const std::string& mode, int32_t block, int32_t default_block, const char* what) {
    if (!off || block == default_block) return;
    add(out, {mode + "_block", mode},
        detail::concat(mode, "_block = ", block, " applies only to ", what, " (", mode, " = INT8), but ", mode,
                       " = NONE; set it or remove the key"));
  };
  unused_block(sh.gather_quantization() == opt::GatherQuantization::NONE, "sharding.gather_quantization",
               sh.gather_quantization_block(), sharding_defaults.gather_quantization_block(), "quantized gathers");
  unused_block(sh.reduce_quantization() == opt::ReduceQuantization::NONE, "sharding.reduce_quantization",
               sh.reduce_quantization_block(), sharding_defaults.reduce_quantization_block(),
               "quantized reduce-scatters");
  const auto& ck = c.checkpoint();
  if (ck.dir().empty()) {
    const opt::CheckpointConfig defaults;
    if (ck.keep_last() != defaults.keep_last()) {
      add(out, {"checkpoint.keep_last", "checkpoint.dir"},
          detail::concat("checkpoint.keep_last = ", ck.keep_last(), " applies only when checkpoints are saved "
                         "(checkpoint.dir), but checkpoint.dir is empty; set it or remove the key"));
    }
    if (ck.async_save()) {
      add(out, {"checkpoint.async_save", "checkpoint.dir"},
          "checkpoint.async_save = true applies only when checkpoints are saved (checkpoint.dir), but checkpoint.dir "
          "is empty; set it or remove the key");
    }
  }
  const auto& sm = c.sample();
  if (sm.tokens() == 0) {
    const opt::SampleConfig defaults;
    std::vector<std::string> set;
    if (sm.temperature() != defaults.temperature()) set.push_back("sample.temperature");
    if (sm.top_k() != defaults.top_k()) set.push_back("sample.top_k");
    if (sm.prompt() != defaults.prompt()) set.push_back("sample.prompt");
    if (sm.seed() != defaults.seed()) set.push_back("sample.seed");
    for (const std::string& key : set) {
      add(out, {key, "sample.tokens"}, key + " applies only when a sample is drawn (sample.tokens > 0), but "
                                             "sample.tokens = 0; set sample.tokens or remove the key");
    }
  }
  const auto& s = c.scheduler();
  if (s.type() != opt::SchedulerConfig::STEP) {
    const opt::SchedulerConfig defaults;
    const std::string type = opt::SchedulerConfig::Type_Name(s.type());
    if (s.step_size() != defaults.step_size()) {
      add(out, {"scheduler.step_size", "scheduler.type"},
          detail::concat("scheduler.step_size = ", s.step_size(), " applies only to scheduler.type = STEP, but "
                         "scheduler.type = ", type, "; remove it or use STEP"));
    }
    if (s.gamma() != defaults.gamma()) {
      add(out, {"scheduler.gamma", "scheduler.type"},
          "scheduler.gamma = " + format_value(s.gamma()) + " applies only to scheduler.type = STEP, but "
          "scheduler.type = " + type + "; remove it or use STEP");
    }
  }
}

void check_cross_field(const Config& c, std::vector<ConfigProblem>* out) {
  check_device(c, out);
  check_offload(c, out);
  check_param_dtype_copy(c, out);
  check_overlap_step(c, out);
  check_precision(c, out);
  check_sharding(c, out);
  check_scheduler(c, out);
  check_optimizer(c, out);
  check_param_groups(c, out);
  check_model(c, out);
  check_checkpoint(c, out);
  check_logging(c, out);
  check_dependent_keys(c, out);
}

}  // namespace zeroshard::config_rules
