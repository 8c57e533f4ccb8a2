// SPDX-License-Identifier: Apache-2.0
#pragma once
// A header that knows the config, for check_layer_headers.py's own test. Mentions in comments do
// not count: config::Config, ShardingOptions::from_config(cfg), "zeroshard.pb.h".
/* Nor in block comments: config::OptimizerConfig,
   from_config(cfg) */
#include "zeroshard.pb.h"
#include "checkpoint.pb.h"  // another generated header: allowed

namespace zeroshard {
struct BadOptions {
  int n = 0;
  const char* text = "config::Config in a string does not count";
  static BadOptions from_config(const config::BadConfig& cfg);
};
}  // namespace zeroshard
