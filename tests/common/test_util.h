// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by zeroshard's tests. The test main (test_main.cpp) owns the Session.

#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "common/error_text.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/core/session.h"

namespace zeroshard {
struct Run;         // zeroshard/config/main.h
struct RunOptions;  // zeroshard/config/run_options.h
}  // namespace zeroshard

namespace zeroshard::test {

Session& session();
// The run the test main started the Session with: the effective config (the command line's
// --config / --set, tests' defaults first) and its RunOptions.
const Run& run();
// Its RunOptions.
const RunOptions& run_options();
// Set by the test main.
void set_run(const Run* run);
// The session's MPI world communicator (CPU tensors).
std::shared_ptr<Communicator> world();
int rank();
int world_size();
// Waits until every rank got here (the world's barrier).
void barrier();

// Options for communicators tests create themselves: short timeout, no job abort.
CommOptions test_comm_options(const std::string& name);

// A fresh folder `<name>_np<world size>_<rank>` under the working directory (the build tree: a
// disk, where O_DIRECT works), one per rank, removed with everything in it when the object goes
// (the world size keeps the np1/np2 runs of one test apart, as SharedDir's).
struct RankDir {
  explicit RankDir(const std::string& name);
  // The folder RankDir(name) makes on `rank` (another rank's, for an error message naming it).
  static std::string path_on(const std::string& name, int rank);
  ~RankDir();
  RankDir(const RankDir&) = delete;
  RankDir& operator=(const RankDir&) = delete;
  std::string path;
};

// A fresh folder `<name>_np<world size>` under the working directory for all ranks together (a
// checkpoint directory; the world size keeps the np1/np2 runs of one test apart): rank 0 makes it
// (and removes it at the end) while the others wait at a barrier.
struct SharedDir {
  explicit SharedDir(const std::string& name);
  ~SharedDir();
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  std::string path;
};

// Comparisons that cannot pass by accident: a NaN is never "within tolerance" (`d > worst`,
// `std::max(worst, d)` and `(NaN).max()` all let one through silently).
// +infinity for a NaN, `d` otherwise.
double nan_as_inf(double d);
// Largest |a - b| over all elements, computed in double; +infinity when the shapes differ or any
// element of either is NaN (or the two hold infinities that do not cancel).
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

}  // namespace zeroshard::test

// Skips (visibly) a test that needs at least `n` ranks. Every rank takes the same decision.
#define ZS_REQUIRE_RANKS(n)                                                                      \
  do {                                                                                           \
    if (::zeroshard::test::world_size() < (n)) {                                                 \
      GTEST_SKIP() << "needs at least " << (n) << " ranks, job has " << ::zeroshard::test::world_size(); \
    }                                                                                            \
  } while (0)
