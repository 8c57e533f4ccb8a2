// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/comm/collective_step.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "zeroshard/base/error.h"

namespace zeroshard::detail {

bool StepOutcome::any_failed() const {
  for (int64_t v : failures) {
    if (v) return true;
  }
  return false;
}

std::string StepOutcome::failed_ranks() const {
  std::string s;
  for (size_t r = 0; r < failures.size(); ++r) {
    if (failures[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
  }
  return s;
}

StepOutcome run_step(Communicator& comm, bool participate, const std::string& tag, const std::function<void()>& fn) {
  StepOutcome out;
  if (participate) {
    try {
      fn();
    } catch (const Error& e) {
      out.error = e.message();
    } catch (const std::exception& e) {
      out.error = e.what();
    }
  }
  at::Tensor t = at::zeros({comm.size()}, at::kLong);
  t[comm.rank()] = out.error.empty() ? 0 : 1;
  comm.all_reduce(t, ReduceOp::kSum, tag)->wait();
  out.failures.resize(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) out.failures[static_cast<size_t>(r)] = t[r].item<int64_t>();
  return out;
}

std::string first_error(Communicator& comm, const StepOutcome& outcome, const std::string& tag) {
  const auto& failures = outcome.failures;
  int root = 0;
  while (root < static_cast<int>(failures.size()) && failures[static_cast<size_t>(root)] == 0) ++root;
  at::Tensor len = at::zeros({1}, at::kLong);
  if (comm.rank() == root) len[0] = static_cast<int64_t>(outcome.error.size());
  comm.broadcast(len, root, tag + ".len")->wait();
  at::Tensor text = at::zeros({std::max<int64_t>(1, len[0].item<int64_t>())}, at::kByte);
  if (comm.rank() == root) std::memcpy(text.data_ptr(), outcome.error.data(), outcome.error.size());
  comm.broadcast(text, root, tag + ".text")->wait();
  std::string out(static_cast<const char*>(text.data_ptr()), static_cast<size_t>(len[0].item<int64_t>()));
  return failures.size() > 1 && comm.rank() != root ? "rank " + std::to_string(root) + ": " + out : out;
}

void io_on_every_rank(Communicator& comm, const std::string& what, const std::string& tag,
                      const std::function<void()>& fn) {
  const StepOutcome step = run_step(comm, true, tag, fn);
  if (!step.any_failed()) return;
  const std::string first = first_error(comm, step, tag + ".error");
  ZS_THROW(IoError, what, " failed on rank(s) ", step.failed_ranks(), ": ", step.error.empty() ? first : step.error);
}

}  // namespace zeroshard::detail
