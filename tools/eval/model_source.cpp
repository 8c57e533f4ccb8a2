// SPDX-License-Identifier: Apache-2.0
// zeroshard-eval's model sources (model_source.h).

#include "model_source.h"

#include <filesystem>

#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama_checkpoint.h"
#include "zeroshard/models/peft_adapter.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;

namespace zs_eval {
namespace {

// A step directory, or a root holding `latest` or step directories.
bool looks_like_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path + "/config.json", ec) || !fs::is_directory(path, ec)) return false;
  return fs::exists(path + "/" + zs::ckpt::kManifestName, ec) || fs::exists(path + "/" + zs::ckpt::kLatestName, ec) ||
         !zs::ckpt::list_checkpoints(path).empty();
}

}  // namespace

EvalModel resolve_model(const std::string& model, const std::string& adapter, const zm::LlamaConfigOptions& options) {
  EvalModel m;
  if (adapter.empty() && looks_like_checkpoint(model)) {
    const zm::LlamaCheckpoint ck = zm::LlamaCheckpoint::open(model, options);
    m.config = ck.config;
    m.lora = ck.lora;
    m.load = [ck](zs::ShardingEngine& engine) { zm::load_checkpoint_weights(engine, ck); };
    return m;
  }
  m.config = zm::LlamaConfig::read(model, options);
  const zm::LlamaConfig config = m.config;
  if (adapter.empty()) {
    m.load = [config, model](zs::ShardingEngine& engine) { zm::load_hf_weights(engine, config, model); };
    return m;
  }
  const zm::PeftAdapter a = zm::read_peft_adapter(adapter, m.config, model);
  m.lora = a.lora;
  m.load = [config, model, a](zs::ShardingEngine& engine) {
    zm::load_hf_weights(engine, config, model);
    zm::load_peft_adapter(engine, a);
  };
  return m;
}

}  // namespace zs_eval
