// SPDX-License-Identifier: Apache-2.0
// zeroshard-selftest: checks every collective of the world communicator, for every dtype, on
// rank-seeded data, element by element, then times a 64 MiB all-gather and reduce-scatter.
//
//   mpirun -n 2 build/bin/zeroshard-selftest [--elements N] [--hang-rank R] [--set key=value ...]
//
// --hang-rank R makes rank R skip one all_reduce (tag 'selftest.hang'), to show what the watchdog
// does with a rank that never joins a collective: the job fails within comm.timeout_s, naming it.

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <optional>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"

namespace zs = zeroshard;

namespace {

struct Options {
  int64_t elements = 100003;  // odd on purpose: shards of uneven padded sizes are the common case
  int hang_rank = -1;
};

// The command line without --config/--set. Returns nullopt after --help/--version.
std::optional<Options> parse(const zs::Session& s, const std::vector<std::string>& args) {
  Options o;
  zs::cli::App app("zeroshard-selftest",
                   "Checks every collective of the world communicator on every dtype, element by element, "
                   "then times a 64 MiB all-gather and reduce-scatter.");
  app.usage("mpirun -n N zeroshard-selftest [OPTIONS]");
  app.add_int("--elements", &o.elements, "elements per collective (default 100003)", 1);
  app.add_int("--hang-rank", &o.hang_rank,
              "rank R skips one all_reduce (tag 'selftest.hang'): shows the watchdog ending the job", 0)
      ->type_name("R");
  app.add_config_options();
  app.then([&] {
    if (o.hang_rank >= s.world_size()) {
      app.fail("--hang-rank " + std::to_string(o.hang_rank) + " but the job has " + std::to_string(s.world_size()) +
               " rank(s)");
    }
  });
  if (!app.parse(args, s.rank() == 0)) return std::nullopt;
  return o;
}

// Value of element i on rank r: exact in every dtype for small i and r.
at::Tensor seeded(int64_t n, int rank, c10::ScalarType dtype) {
  return at::arange(n, at::kLong).remainder(97).add(rank * 3).to(dtype);
}

struct Checker {
  int rank;
  int failures = 0;
  int checks = 0;
  void expect(bool ok, const std::string& what, c10::ScalarType dtype, int64_t n) {
    ++checks;
    if (!ok) ++failures;
    if (rank == 0) std::printf("  %-16s %-9s %10lld  %s\n", what.c_str(), c10::toString(dtype), (long long)n, ok ? "ok" : "MISMATCH");
  }
};

void check_dtype(zs::Communicator& world, c10::ScalarType dtype, int64_t n, Checker& c) {
  const int size = world.size(), rank = world.rank();
  const int64_t shard = (n + size - 1) / size;  // padded shard
  // all_gather: rank r contributes seeded(shard, r).
  at::Tensor out = at::empty({shard * size}, dtype);
  world.all_gather_into(out, seeded(shard, rank, dtype), "selftest.all_gather")->wait();
  bool ok = true;
  for (int r = 0; r < size; ++r) ok = ok && at::equal(out.narrow(0, r * shard, shard), seeded(shard, r, dtype));
  c.expect(ok, "all_gather", dtype, shard * size);
  if (dtype == c10::kBool) return;
  // reduce_scatter(sum): every rank contributes seeded(flat, rank); rank r's shard of the sum.
  at::Tensor shard_out = at::empty({shard}, dtype);
  world.reduce_scatter_into(shard_out, seeded(shard * size, rank, dtype), zs::ReduceOp::kSum, "selftest.reduce_scatter")->wait();
  at::Tensor expected = at::zeros({shard}, at::kLong);
  for (int r = 0; r < size; ++r) expected.add_(seeded(shard * size, r, at::kLong).narrow(0, rank * shard, shard));
  c.expect(at::equal(shard_out, expected.to(dtype)), "reduce_scatter", dtype, shard * size);
  // all_reduce(max) and broadcast from the last rank.
  at::Tensor t = seeded(n, rank, dtype);
  world.all_reduce(t, zs::ReduceOp::kMax, "selftest.all_reduce")->wait();
  c.expect(at::equal(t, seeded(n, size - 1, dtype)), "all_reduce(max)", dtype, n);
  at::Tensor b = seeded(n, rank, dtype);
  world.broadcast(b, size - 1, "selftest.broadcast")->wait();
  c.expect(at::equal(b, seeded(n, size - 1, dtype)), "broadcast", dtype, n);
}

double time_ms(const std::function<void()>& fn, int iters) {
  fn();  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"zeroshard-selftest", {}};  // the Session's keys (comm.timeout_s, ...)
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run& run) {
    const std::optional<Options> parsed = parse(s, run.args);
    if (!parsed) return 0;  // --help, --version
    const Options& opt = *parsed;
    zs::Communicator& world = *s.world();
    if (s.rank() == 0) {
      std::printf("zeroshard communicator self-test: %d rank(s) on backend %s, %lld elements\n", world.size(),
                  world.backend(), (long long)opt.elements);
      std::printf("  %-16s %-9s %10s  %s\n", "collective", "dtype", "elements", "result");
    }
    if (opt.hang_rank >= 0) {
      at::Tensor t = at::full({4}, 1.0f);
      if (s.rank() != opt.hang_rank) {
        world.all_reduce(t, zs::ReduceOp::kSum, "selftest.hang")->wait();
      } else {
        std::printf("rank %d: skipping all_reduce 'selftest.hang' on purpose (--hang-rank)\n", s.rank());
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::hours(1));  // the watchdog ends the job first
      }
    }
    Checker c{s.rank()};
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong, at::kByte, at::kBool}) {
      check_dtype(world, dtype, opt.elements, c);
    }
    // Timing: 64 MiB of fp32 gathered/reduced.
    const int64_t flat = (64ll << 20) / 4, shard = flat / world.size();
    at::Tensor big = at::empty({flat}, at::kFloat).fill_(1), piece = at::empty({shard}, at::kFloat).fill_(1);
    double ag = time_ms([&] { world.all_gather_into(big, piece, "selftest.time")->wait(); }, 5);
    double rs = time_ms([&] { world.reduce_scatter_into(piece, big, zs::ReduceOp::kSum, "selftest.time")->wait(); }, 5);
    // Agree on the outcome across ranks.
    at::Tensor failed = at::full({1}, c.failures, at::kInt);
    world.all_reduce(failed, zs::ReduceOp::kSum, "selftest.outcome")->wait();
    if (s.rank() == 0) {
      std::printf("  all_gather 64 MiB: %.2f ms, reduce_scatter 64 MiB: %.2f ms\n", ag, rs);
      std::printf("SELFTEST %s: %d checks on %d rank(s), %d mismatching\n",
                  failed.item<int>() == 0 ? "PASSED" : "FAILED", c.checks, world.size(), failed.item<int>());
    }
    return failed.item<int>() == 0 ? 0 : 1;
  });
}
