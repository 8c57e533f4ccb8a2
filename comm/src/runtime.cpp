// SPDX-License-Identifier: Apache-2.0
// The MPI runtime behind zeroshard::Session (runtime.h): start, communicators, stop, abort.

#include "zeroshard/comm/runtime.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "mpi_communicator.h"
#include "mpi_peer_channel.h"
#include "mpi_util.h"
#include "watchdog.h"

namespace zeroshard {
namespace {

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, len);
  auto comma = s.find(',');
  return comma == std::string::npos ? s : s.substr(0, comma);
}

}  // namespace

MpiProcessInfo start_mpi_runtime() {
  comm::MpiProcess& proc = comm::mpi_init(nullptr, nullptr);  // MPI needs nothing from argv
  MpiProcessInfo info;
  ZS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  ZS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &info.world_size));
  info.library = mpi_library_version();
  info.thread_level = comm::thread_level_name(proc.thread_level);
  return info;
}

MpiCommunicators open_mpi_communicators(
    const std::function<CommOptions(const std::string& name, int local_world_size)>& options_for) {
  MpiCommunicators out;
  int rank = 0;
  ZS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm node_comm = MPI_COMM_NULL;
  ZS_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm));
  ZS_MPI_CHECK(MPI_Comm_rank(node_comm, &out.local_rank));
  ZS_MPI_CHECK(MPI_Comm_size(node_comm, &out.local_world_size));
  MPI_Comm world_comm = MPI_COMM_NULL;
  ZS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_comm));
  out.world = comm::make_mpi_communicator(world_comm, options_for("world", out.local_world_size));
  out.node = comm::make_mpi_communicator(node_comm, options_for("node", out.local_world_size));
  comm::Watchdog::instance().set_abort_handler([](const std::string& msg) { abort_job(msg, 1); });
  comm::Watchdog::instance().set_peer_channel(comm::make_mpi_peer_channel());
  return out;
}

void stop_mpi_runtime() {
  comm::Watchdog::instance().stop();
  comm::Watchdog::instance().set_abort_handler(nullptr);
  comm::mpi_finalize_if_ours();
}

bool mpi_runtime_running() { return comm::mpi_is_initialized() && !comm::mpi_is_finalized(); }

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
  int size = 1;
  const bool running = mpi_runtime_running();
  if (running) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (running && size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace zeroshard
