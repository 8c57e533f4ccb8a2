#pragma once
// Parameter groups: per-parameter weight decay and learning-rate scale, as the usual AdamW recipes
// set them (no decay on biases, norm weights and embedding tables), applied inside the flat
// shards. ShardingEngine::set_param_groups() resolves them for every trainable parameter and hands
// each shard's element ranges to the optimizer with param_shards() (ParamShard::groups), so a
// sharded step equals torch::optim with the same param groups, element by element.
//
//   optimizer {
//     weight_decay: 0.1
//     no_decay_1d_and_embeddings: true                   # the default
//     param_groups { match: "head.*"  lr_scale: 10 }    # first matching rule wins
//     param_groups { match: "*.pos_emb"  weight_decay: 0 }
//   }

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard {

namespace config {
class OptimizerConfig;
}  // namespace config

struct ParamGroupRule {
  // Glob over the parameter's qualified name (or one of its tied names): '*' matches any run of
  // characters (dots included), '?' one character, [...] a set.
  std::string match;
  std::optional<double> weight_decay;  // replaces the decay; unset: the default's (below)
  double lr_scale = 1;                 // factor on the scheduled learning rate
};

struct ParamGroupOptions {
  double weight_decay = 0;  // the optimizer's, for parameters no rule or exemption covers
  // No decay on parameters of fewer than 2 dimensions (biases, norm weights and biases) and on
  // the weights of torch::nn::Embedding / EmbeddingBag modules.
  bool no_decay_1d_and_embeddings = true;
  std::vector<ParamGroupRule> rules;  // first match wins; a rule overrides the exemption

  // From the config's optimizer section (weight_decay, no_decay_1d_and_embeddings, param_groups).
  static ParamGroupOptions from_config(const config::OptimizerConfig& cfg);
};

// What one parameter is trained with, and why (for reports).
struct ParamGroupAssignment {
  std::string name;
  double weight_decay = 0;
  double lr_scale = 1;
  int64_t numel = 0;
  std::string why;  // "default", "1-D", "embedding", "optimizer.param_groups[1] ('head.*')"
};

// A parameter as the rules see it.
struct ParamGroupParam {
  std::string name;
  std::vector<std::string> aliases;  // tied names
  int64_t dim = 0;
  int64_t numel = 0;
  bool embedding = false;  // the weight of an Embedding / EmbeddingBag module
};

// One assignment per parameter, in order. ConfigError naming optimizer.param_groups[i] when a rule
// has an empty pattern, a negative or non-finite value, or matches no parameter (a misspelt
// pattern would otherwise change nothing).
std::vector<ParamGroupAssignment> assign_param_groups(const ParamGroupOptions& options,
                                                      const std::vector<ParamGroupParam>& params);

// True when `name` matches the glob `pattern` (as ParamGroupRule::match).
bool glob_match(const std::string& pattern, const std::string& name);

// "weight_decay 0 on 26 tensors (12416 elements); weight_decay 0.1 on 24 tensors (786432 elements)"
std::string describe_param_groups(const std::vector<ParamGroupAssignment>& groups);

}  // namespace zeroshard
