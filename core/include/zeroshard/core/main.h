// SPDX-License-Identifier: Apache-2.0
#pragma once
// Entry point helper for zeroshard binaries: errors end the whole job, never a single rank.
// Programs with a config use zeroshard/config/main.h's run_main, which reads the config first and
// comes here with the SessionOptions it resolves to.

#include <exception>
#include <functional>
#include <string>

#include "zeroshard/comm/runtime.h"  // abort_job
#include "zeroshard/core/session_options.h"

namespace zeroshard {

class Session;

// Creates a Session from argv and `options`, runs `body`, and returns its exit code. Any exception
// escaping Session construction or `body` is printed as one line on stderr (with rank, host and
// source location for zeroshard errors) and the whole job is aborted (MPI_Abort) so no other rank
// hangs waiting in a collective; a single-process run exits with status 1 (out of memory: with
// kOutOfMemoryExitCode, after the out-of-memory report).
int run_main(int argc, char** argv, const SessionOptions& options, const std::function<int(Session&)>& body);

// The same with default SessionOptions: for programs that take no config.
int run_main(int argc, char** argv, const std::function<int(Session&)>& body);

// What run_main does with an exception that escaped: the one line (or the out-of-memory report)
// on stderr, then the whole job ends (abort_job). For entry points of their own.
[[noreturn]] void abort_job_for(const std::exception& e);

}  // namespace zeroshard
