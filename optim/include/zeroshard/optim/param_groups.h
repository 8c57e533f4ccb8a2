// SPDX-License-Identifier: Apache-2.0
#pragma once
// Parameter groups: per-parameter weight decay and learning-rate scale, as the usual AdamW recipes
// set them (no decay on biases, norm weights and embedding tables), applied inside the flat
// shards. ShardingEngine::set_param_groups() resolves them for every trainable parameter and hands
// each shard's element ranges to the optimizer with param_shards() (ParamShard::groups), so a
// sharded step equals torch::optim with the same param groups, element by element.
//
//   ParamGroupOptions g;
//   g.weight_decay = 0.1;                  // no_decay_1d_and_embeddings: true by default
//   g.rules = {{"head.*", {}, 10}, {"*.pos_emb", 0.0, 1}};   // first matching rule wins
//   engine.set_param_groups(g);
// (zeroshard/config/resolve.h fills them from a run's config).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard {

struct ParamGroupRule {
  // Glob over the parameter's qualified name (or one of its tied names): '*' matches any run of
  // characters (dots included), '?' one character, [...] a set.
  std::string match;
  std::optional<double> weight_decay;  // replaces the decay; unset: the default's (below)
  double lr_scale = 1;                 // factor on the scheduled learning rate
  // What reports and errors call the rule, e.g. "optimizer.param_groups[1]"; empty: "rules[i]".
  std::string label;
};

struct ParamGroupOptions {
  double weight_decay = 0;  // the optimizer's, for parameters no rule or exemption covers
  // No decay on parameters of fewer than 2 dimensions (biases, norm weights and biases) and on
  // the weights of torch::nn::Embedding / EmbeddingBag modules.
  bool no_decay_1d_and_embeddings = true;
  std::vector<ParamGroupRule> rules;  // first match wins; a rule overrides the exemption
};

// What one parameter is trained with, and why (for reports).
struct ParamGroupAssignment {
  std::string name;
  double weight_decay = 0;
  double lr_scale = 1;
  int64_t numel = 0;
  std::string why;  // "default", "1-D", "embedding", "<label> ('head.*')", e.g. "rules[1] ('head.*')"
};

// A parameter as the rules see it.
struct ParamGroupParam {
  std::string name;
  std::vector<std::string> aliases;  // tied names
  int64_t dim = 0;
  int64_t numel = 0;
  bool embedding = false;  // the weight of an Embedding / EmbeddingBag module
};

// One assignment per parameter, in order. UsageError naming the rule (its label) when it has an
// empty pattern, a negative or non-finite value, or matches no parameter (a misspelt pattern would
// otherwise change nothing), and naming ParamGroupOptions.weight_decay when that is.
std::vector<ParamGroupAssignment> assign_param_groups(const ParamGroupOptions& options,
                                                      const std::vector<ParamGroupParam>& params);

// True when `name` matches the glob `pattern` (as ParamGroupRule::match).
bool glob_match(const std::string& pattern, const std::string& name);

// "weight_decay 0 on 26 tensors (12416 elements); weight_decay 0.1 on 24 tensors (786432 elements)"
std::string describe_param_groups(const std::vector<ParamGroupAssignment>& groups);

}  // namespace zeroshard
