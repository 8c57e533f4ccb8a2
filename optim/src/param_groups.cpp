// SPDX-License-Identifier: Apache-2.0
// Parameter groups: the rules of param_groups.h resolved per parameter.

#include "zeroshard/optim/param_groups.h"

#include <fnmatch.h>

#include <cmath>
#include <map>
#include <sstream>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard {

bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

namespace {

std::string rule_name(size_t i, const ParamGroupRule& r) {
  return r.label.empty() ? "rules[" + std::to_string(i) + "]" : r.label;
}

std::string rule_label(size_t i, const ParamGroupRule& r) { return rule_name(i, r) + " ('" + r.match + "')"; }

bool matches(const ParamGroupRule& r, const ParamGroupParam& p) {
  if (glob_match(r.match, p.name)) return true;
  for (const std::string& a : p.aliases) {
    if (glob_match(r.match, a)) return true;
  }
  return false;
}

}  // namespace

std::vector<ParamGroupAssignment> assign_param_groups(const ParamGroupOptions& options,
                                                      const std::vector<ParamGroupParam>& params) {
  ZS_REQUIRE(std::isfinite(options.weight_decay) && options.weight_decay >= 0, UsageError,
             "ParamGroupOptions.weight_decay = ", format_double(options.weight_decay), " must be finite and >= 0");
  for (size_t i = 0; i < options.rules.size(); ++i) {
    const ParamGroupRule& r = options.rules[i];
    ZS_REQUIRE(!r.match.empty(), UsageError, "parameter group rule ", rule_name(i, r),
               ": match is empty; give a glob over parameter names, e.g. '*.bias' or 'blocks.*.attn.*'");
    ZS_REQUIRE(!r.weight_decay || (std::isfinite(*r.weight_decay) && *r.weight_decay >= 0), UsageError,
               "parameter group rule ", rule_label(i, r), ": weight_decay = ", format_double(r.weight_decay.value_or(0)),
               " must be finite and >= 0");
    ZS_REQUIRE(std::isfinite(r.lr_scale) && r.lr_scale >= 0, UsageError, "parameter group rule ", rule_label(i, r),
               ": lr_scale = ", format_double(r.lr_scale), " must be finite and >= 0");
  }
  std::vector<bool> used(options.rules.size(), false);
  std::vector<ParamGroupAssignment> out;
  out.reserve(params.size());
  for (const ParamGroupParam& p : params) {
    ParamGroupAssignment a;
    a.name = p.name;
    a.numel = p.numel;
    a.weight_decay = options.weight_decay;
    a.why = "default";
    if (options.no_decay_1d_and_embeddings && (p.dim < 2 || p.embedding)) {
      a.weight_decay = 0;
      a.why = p.embedding ? "embedding" : "1-D";
    }
    for (size_t i = 0; i < options.rules.size(); ++i) {
      const ParamGroupRule& r = options.rules[i];
      if (!matches(r, p)) continue;
      used[i] = true;
      a.weight_decay = r.weight_decay.value_or(options.weight_decay);
      a.lr_scale = r.lr_scale;
      a.why = rule_label(i, r);
      break;
    }
    out.push_back(std::move(a));
  }
  for (size_t i = 0; i < options.rules.size(); ++i) {
    if (used[i]) continue;
    // A rule shadowed by an earlier one also counts as matching nothing: it can never apply.
    bool matches_any = false;
    for (const ParamGroupParam& p : params) matches_any = matches_any || matches(options.rules[i], p);
    ZS_THROW(UsageError, "parameter group rule ", rule_label(i, options.rules[i]),
             matches_any ? " matches only parameters an earlier rule already took, so it never applies"
                         : " matches no trainable parameter of the model",
             params.empty() ? std::string() : " (names look like '" + params.front().name + "')");
  }
  return out;
}

std::string describe_param_groups(const std::vector<ParamGroupAssignment>& groups) {
  std::map<std::pair<double, double>, std::pair<int64_t, int64_t>> by;  // (wd, lr) -> (tensors, elements)
  for (const ParamGroupAssignment& g : groups) {
    auto& [tensors, elements] = by[{g.weight_decay, g.lr_scale}];
    ++tensors;
    elements += g.numel;
  }
  std::ostringstream os;
  bool first = true;
  for (const auto& [key, count] : by) {
    os << (first ? "" : "; ") << "weight_decay " << format_double(key.first);
    if (key.second != 1) os << ", lr x" << format_double(key.second);
    os << " on " << count.first << " tensors (" << count.second << " elements)";
    first = false;
  }
  return os.str();
}

}  // namespace zeroshard
