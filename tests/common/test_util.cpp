// SPDX-License-Identifier: Apache-2.0
#include "common/test_util.h"

#include "zeroshard/config/main.h"

#include <filesystem>

#include <ATen/ops/abs.h>
#include <ATen/ops/isnan.h>

#include <cmath>
#include <limits>

namespace zeroshard::test {

Session& session() {
  Session* s = Session::current();
  if (s == nullptr) throw std::logic_error("no zeroshard Session: link the test with zs_test_main");
  return *s;
}

namespace {
const Run* g_run = nullptr;
}  // namespace

void set_run(const Run* run) { g_run = run; }

const Run& run() {
  if (g_run == nullptr) throw std::logic_error("no zeroshard Run: link the test with zs_test_main");
  return *g_run;
}

const RunOptions& run_options() { return run().options; }

std::shared_ptr<Communicator> world() { return session().world(); }
int rank() { return session().rank(); }
int world_size() { return session().world_size(); }

CommOptions test_comm_options(const std::string& name) {
  CommOptions o = session().comm_options(name);
  o.abort_on_timeout = false;
  return o;
}

double nan_as_inf(double d) { return std::isnan(d) ? std::numeric_limits<double>::infinity() : d; }

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!a.defined() || !b.defined() || a.sizes() != b.sizes()) return kInf;
  if (a.numel() == 0) return 0;
  const at::Tensor d = (a.detach().to(at::kCPU, at::kDouble) - b.detach().to(at::kCPU, at::kDouble)).abs();
  if (d.isnan().any().item<bool>()) return kInf;
  return d.max().item<double>();
}

void barrier() { world()->barrier()->wait(); }

std::string RankDir::path_on(const std::string& name, int on_rank) {
  return (std::filesystem::current_path() /
          (name + "_np" + std::to_string(world_size()) + "_" + std::to_string(on_rank)))
      .string();
}

RankDir::RankDir(const std::string& name) {
  path = path_on(name, rank());
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

RankDir::~RankDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

SharedDir::SharedDir(const std::string& name) {
  path = (std::filesystem::current_path() / (name + "_np" + std::to_string(world_size()))).string();
  if (rank() == 0) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  barrier();
}

SharedDir::~SharedDir() {
  barrier();
  std::error_code ec;
  if (rank() == 0) std::filesystem::remove_all(path, ec);
}

}  // namespace zeroshard::test
