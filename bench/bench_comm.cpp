// SPDX-License-Identifier: Apache-2.0
// bench_comm: all-gather and reduce-scatter bandwidth of zeroshard's MPI communicator against raw
// MPI calls on the same buffers, in the same run.
//
//   mpirun -n 2 build/bin/bench_comm [--min-mib 1] [--max-mib 256] [--reps 5]
//
// Sizes are the gathered (flat) fp32 buffer, as in nccl-tests. Per size and op, three variants run
// interleaved `reps` times (order rotated each time) and the median is kept:
//   raw_nb   MPI_Iallgather / MPI_Ireduce_scatter_block + MPI_Wait on the calling thread (the very
//            calls our backend makes),
//   raw_blk  MPI_Allgather / MPI_Reduce_scatter_block,
//   zs       Communicator::all_gather_into / reduce_scatter_into + Work::wait.
// Bus bandwidth = bytes * (n-1)/n / time. ratio = median over repetitions of t(raw_nb) / t(zs),
// each pair measured back to back (>= 1: ours is as fast), which cancels slow drifts of the machine.
// zs's reduce-scatter is its own pipelined ring (comm.reduce_scatter_ring, the default), so its
// ratio is a speed-up over Open MPI's call. Per size also: rs/ag = zs reduce-scatter bus bandwidth
// over zs all-gather bus bandwidth, and memcpy GB/s (one thread copying the bytes a rank receives,
// the fastest of 10: the physical limit of a shared-memory transfer on this host).
// Goals: all-gather ratio >= 0.95 and rs/ag >= 0.8 at >= 16 MiB. Final line: JSON.

#include <ATen/ops/empty.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"

namespace zs = zeroshard;

namespace {

struct Args {
  int64_t min_mib = 1, max_mib = 256;
  int reps = 9;
};

// Returns nullopt after --help/--version (printed when `print`).
std::optional<Args> parse(const std::vector<std::string>& args, bool print) {
  Args o;
  zs::cli::App app("bench_comm",
                   "All-gather and reduce-scatter bandwidth of zeroshard's MPI communicator against raw MPI calls on "
                   "the same buffers, in the same run. Final line: JSON.");
  app.usage("mpirun -n N bench_comm [OPTIONS]");
  app.add_int("--min-mib", &o.min_mib, "smallest gathered buffer, MiB (default 1)", 1);
  app.add_int("--max-mib", &o.max_mib, "largest gathered buffer, MiB (default 256); sizes grow 4x", 1);
  app.add_int("--reps", &o.reps, "interleaved repetitions per size, median kept (default 9)", 1);
  app.add_config_options();
  app.then([&] {
    if (o.max_mib < o.min_mib) {
      app.fail("--max-mib (" + std::to_string(o.max_mib) + ") is below --min-mib (" + std::to_string(o.min_mib) + ")");
    }
  });
  if (!app.parse(args, print)) return std::nullopt;
  return o;
}

// Seconds per call of fn, `iters` calls after a barrier; the slowest rank's time counts.
double timed(MPI_Comm comm, int iters, const std::function<void()>& fn) {
  MPI_Barrier(comm);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) fn();
  double t = (MPI_Wtime() - t0) / iters, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string op;
  int64_t bytes;
  double raw_nb, raw_blk, ours;
  double ratio;  // median over repetitions of t(raw_nb) / t(zs) measured back to back
};

// GB/s of one thread's memcpy of `bytes`: the fastest of 10 copies (what the memory can do; both
// ranks copy at once, as they transfer at once).
double memcpy_gbps(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes), 2);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const double t0 = MPI_Wtime();
    std::memcpy(b.data(), a.data(), a.size());
    best = std::min(best, MPI_Wtime() - t0);
  }
  volatile char sink = b[static_cast<size_t>(bytes / 2)];  // the copies are used
  (void)sink;
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"bench_comm", {}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run&) {
    const std::optional<Args> parsed = parse(s.args(), s.rank() == 0);
    if (!parsed) return 0;  // --help, --version
    const Args& args = *parsed;
    zs::Communicator& world = *s.world();
    const int n = s.world_size();
    MPI_Comm raw;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    std::vector<Row> rows;
    if (s.rank() == 0) {
      std::printf("bench_comm: %d rank(s), fp32, median of %d interleaved repetitions\n", n, args.reps);
      std::printf("%-15s %9s %11s %11s %11s %9s %9s\n", "op", "size", "raw_nb ms", "raw_blk ms", "zs ms",
                  "zs GB/s", "ratio");
    }
    std::vector<std::pair<int64_t, double>> rs_over_ag, memcpy_rates;
    for (int64_t mib = args.min_mib; mib <= args.max_mib; mib *= 4) {
      const int64_t bytes = mib << 20, flat = bytes / 4 / n * n, shard = flat / n;
      at::Tensor out = at::empty({flat}, at::kFloat).fill_(1.0f);
      at::Tensor in = at::empty({shard}, at::kFloat).fill_(1.0f);
      const int iters = static_cast<int>(std::clamp<int64_t>(64 / mib, 1, 32));
      const int cnt = static_cast<int>(shard);
      for (const char* op : {"all_gather", "reduce_scatter"}) {
        const bool ag = std::string(op) == "all_gather";
        std::function<void()> raw_nb = [&] {
          MPI_Request r;
          if (ag) MPI_Iallgather(in.data_ptr(), cnt, MPI_FLOAT, out.data_ptr(), cnt, MPI_FLOAT, raw, &r);
          else MPI_Ireduce_scatter_block(out.data_ptr(), in.data_ptr(), cnt, MPI_FLOAT, MPI_SUM, raw, &r);
          MPI_Wait(&r, MPI_STATUS_IGNORE);
        };
        std::function<void()> raw_blk = [&] {
          if (ag) MPI_Allgather(in.data_ptr(), cnt, MPI_FLOAT, out.data_ptr(), cnt, MPI_FLOAT, raw);
          else MPI_Reduce_scatter_block(out.data_ptr(), in.data_ptr(), cnt, MPI_FLOAT, MPI_SUM, raw);
        };
        std::function<void()> ours = [&] {
          if (ag) world.all_gather_into(out, in, "bench")->wait();
          else world.reduce_scatter_into(in, out, zs::ReduceOp::kSum, "bench")->wait();
        };
        std::vector<double> a, b, c, paired;
        timed(raw, 1, raw_nb);  // warm-up: first touch of buffers and MPI's internal state
        timed(raw, 1, ours);
        for (int r = 0; r < args.reps; ++r) {
          // Rotate the order each repetition so no variant always runs first (or after another).
          double t[3];
          std::function<void()>* fns[3] = {&raw_nb, &raw_blk, &ours};
          for (int k = 0; k < 3; ++k) {
            int v = (k + r) % 3;
            t[v] = timed(raw, iters, *fns[v]);
          }
          a.push_back(t[0]);
          b.push_back(t[1]);
          c.push_back(t[2]);
          paired.push_back(t[0] / t[2]);
        }
        Row row{op, bytes, median(a), median(b), median(c), median(paired)};
        rows.push_back(row);
        if (s.rank() == 0) {
          double busbw = bytes * double(n - 1) / n / row.ours / 1e9;
          std::printf("%-15s %6lld MiB %11.3f %11.3f %11.3f %9.2f %9.3f\n", op, (long long)mib, row.raw_nb * 1e3,
                      row.raw_blk * 1e3, row.ours * 1e3, busbw, row.ratio);
        }
      }
      // The all-gather and the reduce-scatter just measured move the same bytes: time ratio.
      const double rs_ag = rows[rows.size() - 2].ours / rows.back().ours;
      double mc = memcpy_gbps(bytes * (n - 1) / n);
      MPI_Allreduce(MPI_IN_PLACE, &mc, 1, MPI_DOUBLE, MPI_MIN, raw);  // the slower rank's
      rs_over_ag.emplace_back(bytes, rs_ag);
      memcpy_rates.emplace_back(bytes, mc);
      if (s.rank() == 0) {
        std::printf("%-15s %6lld MiB   rs/ag bus bandwidth %.2f (goal >= 0.8 at >= 16 MiB); memcpy %.2f GB/s\n",
                    "", (long long)mib, rs_ag, mc);
      }
    }
    double min_ratio = 1e9;
    std::ostringstream js;
    js << "{\"bench\":\"comm\",\"ranks\":" << n << ",\"dtype\":\"float32\",\"results\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      // Goal on the all-gather's ratio; the reduce-scatter's (a speed-up over MPI's) has rs/ag.
      if (r.op == "all_gather" && r.bytes >= (16ll << 20)) min_ratio = std::min(min_ratio, r.ratio);
      js << (i ? "," : "") << "{\"op\":\"" << r.op << "\",\"bytes\":" << r.bytes << ",\"raw_nb_s\":" << r.raw_nb
         << ",\"raw_blocking_s\":" << r.raw_blk << ",\"zs_s\":" << r.ours << ",\"ratio\":" << r.ratio << "}";
    }
    double min_rs_ag = 1e9;
    js << "],\"rs_over_ag\":[";
    for (size_t i = 0; i < rs_over_ag.size(); ++i) {
      if (rs_over_ag[i].first >= (16ll << 20)) min_rs_ag = std::min(min_rs_ag, rs_over_ag[i].second);
      js << (i ? "," : "") << "{\"bytes\":" << rs_over_ag[i].first << ",\"ratio\":" << rs_over_ag[i].second
         << ",\"memcpy_gbps\":" << memcpy_rates[i].second << "}";
    }
    bool have = min_ratio < 1e9 && min_rs_ag < 1e9;
    js << "],\"min_ratio_at_ge_16MiB\":" << (have ? min_ratio : 0) << ",\"goal\":0.95"
       << ",\"min_rs_over_ag_at_ge_16MiB\":" << (have ? min_rs_ag : 0) << ",\"rs_goal\":0.8,\"goal_met\":"
       << (have && min_ratio >= 0.95 && min_rs_ag >= 0.8 ? "true" : "false") << "}";
    if (s.rank() == 0) std::printf("%s\n", js.str().c_str());
    MPI_Comm_free(&raw);
    return 0;
  });
}
