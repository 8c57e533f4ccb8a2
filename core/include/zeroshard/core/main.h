#pragma once
// Entry point helper for every zeroshard binary: errors end the whole job, never a single rank.

#include <functional>
#include <string>

#include "zeroshard/comm/runtime.h"  // abort_job

namespace zeroshard {

class Session;

// Creates a Session from argv, runs `body`, and returns its exit code. Any exception escaping
// Session construction or `body` is printed as one line on stderr (with rank, host and source
// location for zeroshard errors) and the whole job is aborted (MPI_Abort) so no other rank hangs
// waiting in a collective; a single-process run exits with status 1.
int run_main(int argc, char** argv, const std::function<int(Session&)>& body);

}  // namespace zeroshard
