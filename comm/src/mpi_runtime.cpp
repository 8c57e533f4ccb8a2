// SPDX-License-Identifier: Apache-2.0
#include "mpi_util.h"

namespace zeroshard::comm {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return detail::concat("MPI error code ", code);
  return detail::concat(std::string(buf, len), " (MPI error code ", code, ")");
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown MPI thread level";
}

bool mpi_is_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

bool mpi_is_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

namespace {
MpiProcess& process_state() {
  static MpiProcess proc;
  return proc;
}
}  // namespace

MpiProcess& mpi_init(int* argc, char*** argv) {
  MpiProcess& proc = process_state();
  ZS_REQUIRE(!mpi_is_finalized(), CommError, "MPI was already finalized in this process; zeroshard "
             "cannot start a new Session after MPI_Finalize");
  if (!mpi_is_initialized()) {
    int provided = MPI_THREAD_SINGLE;
    ZS_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    proc.initialized_by_us = true;
    proc.thread_level = provided;
  } else {
    ZS_MPI_CHECK(MPI_Query_thread(&proc.thread_level));
  }
  // Errors come back as codes, turned into CommError with MPI's text, instead of MPI aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  ZS_REQUIRE(proc.thread_level >= MPI_THREAD_MULTIPLE, CommError,
             "MPI provides only ", thread_level_name(proc.thread_level),
             " but zeroshard needs MPI_THREAD_MULTIPLE (its communicator progress threads and watchdog "
             "call MPI concurrently). Use an MPI built with thread support (Open MPI: "
             "--enable-mpi-thread-multiple, the default since 3.0), and if you call MPI_Init yourself, "
             "call MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) instead.");
  return proc;
}

void mpi_finalize_if_ours() {
  MpiProcess& proc = process_state();
  if (proc.initialized_by_us && !mpi_is_finalized()) MPI_Finalize();
}

}  // namespace zeroshard::comm
