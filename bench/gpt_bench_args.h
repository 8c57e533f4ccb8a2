// SPDX-License-Identifier: Apache-2.0
#pragma once
// Command line shared by the GPT benchmarks (bench_step, bench_memory, bench_pretrained): model
// shape, batch and steps, on zeroshard/base/cli.h like every zeroshard program's.

#include <string>

#include "engine/models.h"
#include "zeroshard/base/cli.h"

namespace zs_bench {

struct GptBenchArgs {
  zs_test::GptConfig model;
  int64_t batch = 8;
  int steps = 0;
};

// Adds --dim --layers --heads --seq --vocab to `app`, read into `o` (which holds the defaults), and
// with `warmup_steps` >= 0 also --batch and --steps (which must exceed the warm-up).
inline void add_gpt_bench_args(zeroshard::cli::App& app, GptBenchArgs& o, int warmup_steps) {
  const auto dflt = [](int64_t v) { return " (default " + std::to_string(v) + ")"; };
  app.add_int("--dim", &o.model.dim, "model width" + dflt(o.model.dim), 1);
  app.add_int("--layers", &o.model.layers, "blocks" + dflt(o.model.layers), 1);
  app.add_int("--heads", &o.model.heads, "attention heads" + dflt(o.model.heads), 1);
  app.add_int("--seq", &o.model.seq, "tokens per sequence" + dflt(o.model.seq), 1);
  app.add_int("--vocab", &o.model.vocab, "vocabulary" + dflt(o.model.vocab), 1);
  if (warmup_steps < 0) return;
  app.add_int("--batch", &o.batch, "sequences per rank per step" + dflt(o.batch), 1);
  app.add_int("--steps", &o.steps, "steps, the first " + std::to_string(warmup_steps) + " not timed" + dflt(o.steps), 1);
  app.then([&app, &o, warmup_steps] {
    if (o.steps <= warmup_steps) {
      app.fail("--steps must be > " + std::to_string(warmup_steps) + " (" + std::to_string(warmup_steps) + " warm-up)");
    }
  });
}

}  // namespace zs_bench
