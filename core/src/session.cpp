#include "zeroshard/core/session.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/mpi_communicator.h"
#include "comm/mpi_peer_channel.h"
#include "comm/mpi_util.h"
#include "comm/watchdog.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/core/logging.h"
#include "zeroshard/core/main.h"
#include "zeroshard/core/memory_report.h"

namespace zeroshard {
namespace {

Session* g_current = nullptr;

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, len);
  auto comma = s.find(',');
  return comma == std::string::npos ? s : s.substr(0, comma);
}

}  // namespace

Session::Session(int argc, char** argv) {
  start(argc, argv);  // reads the config from argv after MPI is up, so errors carry the rank
}

Session::Session(int argc, char** argv, Config config) : config_(std::move(config)) {
  validate_config(config_);
  for (int i = 0; i < argc; ++i) args_.emplace_back(argv[i]);
  start(0, nullptr);
}

Session* Session::current() { return g_current; }

void Session::start(int argc, char** argv) {
  ZS_REQUIRE(g_current == nullptr, UsageError, "a zeroshard::Session already exists in this process; "
             "create exactly one (run_main creates it for you)");
  // Read before MPI_Init: a process started without a launcher becomes an MPI singleton, and
  // Open MPI then sets PMIx variables of its own that would hide what the user's launcher said.
  launch_env_ = detect_launch_env();
  comm::mpi_init(nullptr, nullptr);  // MPI needs nothing from argv (and argv may lack its null end)
  ZS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  ZS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  host_ = hostname();
  detail::set_process_identity(rank_, world_size_, host_);

  if (argc > 0) {
    CommandLine cl = parse_command_line(argc, argv);
    config_ = build_config(cl);
    args_ = cl.rest;
  }
  LogSettings log;
  log.level = parse_log_level(config_.logging().level(), "config field logging.level");
  log = parse_log_ranks(config_.logging().ranks(), log, "config field logging.ranks");
  set_log_settings(apply_log_env(log));

  MPI_Comm node_comm = MPI_COMM_NULL;
  ZS_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm));
  ZS_MPI_CHECK(MPI_Comm_rank(node_comm, &local_rank_));
  ZS_MPI_CHECK(MPI_Comm_size(node_comm, &local_world_size_));
  check_launch_env();

  MPI_Comm world_comm = MPI_COMM_NULL;
  ZS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_comm));
  world_ = comm::make_mpi_communicator(world_comm, comm_options("world"));
  node_ = comm::make_mpi_communicator(node_comm, comm_options("node"));
  comm::Watchdog::instance().set_abort_handler([](const std::string& msg) { abort_job(msg, 1); });
  comm::Watchdog::instance().set_peer_channel(comm::make_mpi_peer_channel());
  pick_device();
  // Before the program allocates anything: the tracking allocator counts only what comes after.
  apply_memory_config(config_.memory(), device_, rank_, world_size_);
  // runtime.seed: the same initial weights on every rank and in every run, unless the program
  // seeds again (the examples reseed per rank for training, so dropout masks differ).
  at::manual_seed(config_.runtime().seed());
  g_current = this;

  ZS_LOG(kInfo) << "zeroshard " << ZS_VERSION << ": " << world_size_ << " rank(s), " << local_world_size_
                << " on this host; device " << device_.str() << "; " << mpi_library_version() << " ("
                << comm::thread_level_name(MPI_THREAD_MULTIPLE) << "); launcher " << launch_env_.source
                << "; NCCL backend " << (nccl_compiled() ? "built" : "not built");
}

void Session::check_launch_env() const {
  const LaunchEnv& e = launch_env_;
  if (e.source == "none" || e.world_size < 0) return;
  ZS_REQUIRE(e.world_size == world_size_ && e.rank == rank_, ConfigError, "the launcher (", e.source,
             ") says this process is ", e.describe(), " but MPI sees rank ", rank_, " of ", world_size_,
             ". zeroshard communicates through MPI: start the job with `mpirun -n N` (or srun with "
             "MPI/PMIx support), not with a launcher that starts independent processes.");
  if (e.local_rank >= 0 && e.local_rank != local_rank_) {
    ZS_LOG(kWarn) << "launcher (" << e.source << ") says local rank " << e.local_rank
                  << " but MPI's shared-memory split gives " << local_rank_ << "; using " << local_rank_;
  }
}

void Session::pick_device() {
  using Dev = config::RuntimeConfig;
  const auto want = config_.runtime().device();
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (want == Dev::CPU || (want == Dev::AUTO && gpus == 0)) {
    device_ = c10::Device(c10::kCPU);
    return;
  }
  ZS_REQUIRE(gpus > 0, ConfigError, "runtime.device = CUDA but no CUDA device is visible on host ", host_,
             " (this LibTorch ", torch::cuda::is_available() ? "sees no GPU" : "has no CUDA support or no GPU",
             "); use runtime.device=CPU or AUTO");
  ZS_REQUIRE(local_rank_ < gpus, ConfigError, "local rank ", local_rank_, " on host ", host_, " needs GPU ",
             local_rank_, " but only ", gpus, " GPU(s) are visible; start at most ", gpus,
             " ranks per node or set CUDA_VISIBLE_DEVICES");
  device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank_));
}

CommOptions Session::comm_options(const std::string& name) const {
  CommOptions o;
  o.name = name;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.comm().timeout_s() * 1000.0));
  o.abort_on_timeout = config_.comm().abort_on_timeout();
  o.check_signatures = config_.comm().check_signatures();
  // Polling before sleeping only pays when every rank has a core for it.
  const unsigned cores = std::thread::hardware_concurrency();
  const bool oversubscribed = cores > 0 && static_cast<unsigned>(local_world_size_) > cores;
  if (oversubscribed) o.poll_before_sleep = std::chrono::microseconds::zero();
  return o;
}

std::shared_ptr<Communicator> Session::device_world() {
  using Backend = config::CommConfig;
  const auto backend = config_.comm().backend();
  if (device_.is_cpu()) {
    ZS_REQUIRE(backend != Backend::NCCL, ConfigError, "comm.backend = NCCL but the device is CPU "
               "(runtime.device resolved to cpu); NCCL needs CUDA tensors. Use comm.backend=AUTO or MPI");
    return world_;
  }
  ZS_REQUIRE(backend != Backend::MPI, ConfigError, "comm.backend = MPI but the device is ", device_.str(),
             "; the MPI backend takes CPU tensors only. Use comm.backend=AUTO or NCCL");
  if (!device_world_) device_world_ = make_nccl_communicator(world_, device_.index(), comm_options("world/nccl"));
  return device_world_;
}

Session::~Session() {
  device_world_.reset();
  world_.reset();
  node_.reset();
  comm::Watchdog::instance().stop();
  comm::Watchdog::instance().set_abort_handler(nullptr);
  if (g_current == this) g_current = nullptr;
  comm::mpi_finalize_if_ours();
}

}  // namespace zeroshard
