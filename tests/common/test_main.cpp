// SPDX-License-Identifier: Apache-2.0
// Shared main of zeroshard's GoogleTest binaries, single- or multi-rank.
// - Reads the command line's config (--config / --set; every key is accepted: tests read any),
//   with a 120 s collective timeout and the CPU device unless the command line says otherwise, so a
//   test that hangs a collective fails with the watchdog's message; then starts a Session
//   (collective) with its SessionOptions. Tests reach the Run through zeroshard::test::run().
// - Rank 0 prints GoogleTest's normal output; other ranks print only their failures, prefixed.
// - All ranks agree on the outcome: any failure on any rank fails every rank; exit 77 (CTest
//   "skipped") only when every test was skipped on every rank.
// Tests should prefer EXPECT_* before collectives: an ASSERT that returns early on one rank leaves
// the others waiting in the next collective (the watchdog then reports it).

#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/main.h"
#include "zeroshard/core/session.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::vector<char*> args(argv, argv + argc);
  // Defaults for tests; the user's --set flags come later and win. CPU device: the CPU tests must
  // run on GPU machines too with any rank count; GPU tests pick their CUDA device themselves.
  std::string timeout = "--set=comm.timeout_s=120", device = "--set=runtime.device=CPU";
  args.insert(args.begin() + 1, {timeout.data(), device.data()});
  const int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);  // argv convention
  zeroshard::Run run;
  try {
    run = zeroshard::load_run(nargs, args.data(), zeroshard::Program{"zeroshard tests", {zeroshard::keys::all()}});
  } catch (const std::exception& e) {
    zeroshard::abort_job(e.what(), 1);  // before MPI: every rank alike
  }
  zeroshard::test::set_run(&run);
  std::vector<char*> rest;
  for (std::string& a : run.args) rest.push_back(a.data());
  const int nrest = static_cast<int>(rest.size());
  rest.push_back(nullptr);
  std::unique_ptr<zeroshard::Session> session;
  try {
    session = std::make_unique<zeroshard::Session>(nrest, rest.data(), run.options.session);
  } catch (const std::exception& e) {
    zeroshard::abort_job(e.what(), 1);
  }
  if (session->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(session->rank()));
  }
  int rc = RUN_ALL_TESTS();
  const auto* ut = ::testing::UnitTest::GetInstance();
  // [0]: this rank failed, [1]: this rank ran a test that did not skip.
  at::Tensor flags = at::zeros({2}, at::kInt);
  flags[0] = (rc != 0 || ut->failed_test_count() > 0) ? 1 : 0;
  flags[1] = (ut->test_to_run_count() > ut->skipped_test_count()) ? 1 : 0;
  try {
    session->world()->all_reduce(flags, zeroshard::ReduceOp::kMax, "test.outcome")->wait();
  } catch (const std::exception& e) {
    zeroshard::abort_job(e.what(), 1);
  }
  int exit_code = flags[0].item<int>() ? 1 : (flags[1].item<int>() ? 0 : 77);
  if (session->rank() == 0 && exit_code == 77) {
    std::printf("zeroshard test main: every test was skipped on every rank (exit 77, CTest: Skipped)\n");
  }
  session.reset();
  return exit_code;
}
