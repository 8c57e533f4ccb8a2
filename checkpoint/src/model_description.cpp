// SPDX-License-Identifier: Apache-2.0
// The run's description of its model (checkpoint.h ModelDescription) in the manifest and back.

#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zeroshard::ckpt {

void describe_model(Manifest& m, const ModelDescription& d) {
  if (!d.hf_config.empty()) m.set_hf_config(d.hf_config);
  if (!d.lora) return;
  LoraDescription* l = m.mutable_lora();
  l->set_rank(d.lora->rank);
  l->set_alpha(d.lora->alpha);
  l->set_dropout(d.lora->dropout);
  for (const std::string& t : d.lora->targets) l->add_targets(t);
}

ModelDescription model_description(const Manifest& m) {
  ModelDescription d;
  d.hf_config = m.hf_config();
  if (m.has_lora()) {
    lora::Options o;
    o.rank = m.lora().rank();
    o.alpha = m.lora().alpha();
    o.dropout = m.lora().dropout();
    o.targets.assign(m.lora().targets().begin(), m.lora().targets().end());
    d.lora = o;
  }
  return d;
}

}  // namespace zeroshard::ckpt
