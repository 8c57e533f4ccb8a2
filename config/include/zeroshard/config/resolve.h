// SPDX-License-Identifier: Apache-2.0
#pragma once
// resolve(): a validated Config to RunOptions, the plain options of every layer (run_options.h).
// The one place a config key is read besides validation (config.h); each section has a function of
// its own in resolve.cpp. A library program that does not use run_main:
//
//   zeroshard::CommandLine cl = zeroshard::parse_command_line(argc, argv);
//   const zeroshard::Config cfg = zeroshard::build_config(cl);         // parsed and validated
//   const zeroshard::RunOptions run = zeroshard::resolve(cfg);
//   zeroshard::Session s(argc, argv, run.session);
//   zeroshard::ShardingEngine engine(s, model.ptr(), run.sharding);
//   auto opt = zeroshard::make_engine_optimizer(run.optimizer, run.offload, s.rank(), &engine.memory());
//
// Thread-safety: a pure function.

#include "zeroshard/config/config.h"
#include "zeroshard/config/run_options.h"

namespace zeroshard {

// `validated` must have passed validate_config (build_config validates): every value is then in
// range and every rule between keys holds, so resolve() cannot fail on it. UsageError when it does
// not pass (the problems listed).
RunOptions resolve(const Config& validated);

// The data section alone (data.path, data.val_fraction, data.format), as resolve() gives it in
// RunOptions::data: for a program that chooses the keys it acts on from the config (ProgramOf).
DataOptions resolve_data(const Config& validated);

}  // namespace zeroshard
