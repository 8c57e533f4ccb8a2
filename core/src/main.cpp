#include "zeroshard/core/main.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <exception>
#include <memory>

#include <c10/util/Exception.h>

#include "zeroshard/core/error.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/core/session.h"

namespace zeroshard {

void abort_job(const std::string& message, int code) {
  // The first caller reports and ends the job; a second one (another thread failing because of
  // the same problem) waits for that instead of printing the error again.
  static std::atomic<bool> aborting{false};
  if (aborting.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (initialized && !finalized && size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int run_main(int argc, char** argv, const std::function<int(Session&)>& body) {
  // The Session lives outside the try block: on an error the job is aborted before its destructor
  // could wait for communicators that other ranks will never complete.
  std::unique_ptr<Session> session;
  try {
    session = std::make_unique<Session>(argc, argv);
    int rc = body(*session);
    session.reset();
    return rc;
  } catch (const std::exception& e) {
    // Out of memory: the summary, the largest allocations and a snapshot file, then a distinct
    // exit status (memory_report.h).
    if (is_out_of_memory(e)) abort_job(out_of_memory_report(e), kOutOfMemoryExitCode);
    if (dynamic_cast<const Error*>(&e) != nullptr) abort_job(e.what(), 1);
    // LibTorch's errors carry a C++ backtrace in what(); the message alone says what went wrong.
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    int rank = detail::process_rank();
    abort_job(detail::concat("zeroshard: unhandled exception on rank ", rank, " (", detail::process_host(),
                             "): ", c10_error != nullptr ? c10_error->what_without_backtrace() : e.what()),
              1);
  } catch (...) {
    abort_job(detail::concat("zeroshard: unknown exception on rank ", detail::process_rank()), 1);
  }
}

}  // namespace zeroshard
