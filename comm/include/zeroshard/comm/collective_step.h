// SPDX-License-Identifier: Apache-2.0
#pragma once
// A step every rank runs and all agree on: run locally, catch the error, then one all-reduce of
// who failed, so a failure on one rank fails the step on every rank instead of leaving the others
// waiting in the next collective (checkpoints, pretrained weights).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"

namespace zeroshard::detail {

// What one collective step of a save or load left: which ranks failed (entry r is 1 when rank r
// did) and this rank's error text.
struct StepOutcome {
  std::vector<int64_t> failures;
  std::string error;
  bool any_failed() const;
  std::string failed_ranks() const;  // "1, 3"
};

// Runs `fn` where `participate` is true, catching its error, then agrees over `comm` on who
// failed (one all-reduce). Collective over `comm`.
StepOutcome run_step(Communicator& comm, bool participate, const std::string& tag, const std::function<void()>& fn);

// The error text of the lowest failed rank, on every rank (collective; call only when one failed).
std::string first_error(Communicator& comm, const StepOutcome& outcome, const std::string& tag);

// Runs `fn` on every rank and, when it failed on any, throws IoError on every rank: "<what>
// failed on rank(s) R: " and this rank's own error where it failed, else the lowest failed rank's.
// For local storage work that can fail on some ranks only (a drive too small on one node) right
// before a collective the others would wait in for the rank that left. Collective over `comm`.
void io_on_every_rank(Communicator& comm, const std::string& what, const std::string& tag,
                      const std::function<void()>& fn);

}  // namespace zeroshard::detail
