// SPDX-License-Identifier: Apache-2.0
#pragma once
// The rules between config keys (config_rules.cpp, "Rules between keys" in docs/config.md: the one
// place each rule is written).

#include <vector>

#include "zeroshard/config/config.h"

namespace zeroshard::config_rules {

// Appends every violated rule between keys and every bad list entry or key with a format of its
// own to `out`.
void check_cross_field(const Config& cfg, std::vector<ConfigProblem>* out);

}  // namespace zeroshard::config_rules
