// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/core/main.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <exception>
#include <memory>

#include <c10/util/Exception.h>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/runtime.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/core/session.h"

namespace zeroshard {

void abort_job_for(const std::exception& e) {
  // Out of memory: the summary, the largest allocations and a snapshot file, then a distinct
  // exit status (memory_report.h).
  if (is_out_of_memory(e)) abort_job(out_of_memory_report(e), kOutOfMemoryExitCode);
  if (dynamic_cast<const Error*>(&e) != nullptr) abort_job(e.what(), 1);
  // LibTorch's errors carry a C++ backtrace in what(); the message alone says what went wrong.
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  abort_job(detail::concat("zeroshard: unhandled exception on rank ", detail::process_rank(), " (",
                           detail::process_host(), "): ",
                           c10_error != nullptr ? c10_error->what_without_backtrace() : e.what()),
            1);
}

int run_main(int argc, char** argv, const SessionOptions& options, const std::function<int(Session&)>& body) {
  // The Session lives outside the try block: on an error the job is aborted before its destructor
  // could wait for communicators that other ranks will never complete.
  std::unique_ptr<Session> session;
  try {
    session = std::make_unique<Session>(argc, argv, options);
    int rc = body(*session);
    session.reset();
    return rc;
  } catch (const std::exception& e) {
    abort_job_for(e);
  } catch (...) {
    abort_job(detail::concat("zeroshard: unknown exception on rank ", detail::process_rank()), 1);
  }
}

int run_main(int argc, char** argv, const std::function<int(Session&)>& body) {
  return run_main(argc, argv, SessionOptions{}, body);
}

}  // namespace zeroshard
