#include "zeroshard/core/session.h"
#include "zeroshard/core/config.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "zeroshard/comm/factory.h"
#include "zeroshard/comm/runtime.h"
#include "zeroshard/base/logging.h"
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

// OpenBLAS (Debian's libopenblas0-pthread, behind libblas.so.3 where installed) starts a thread per
// core in every process, and LibTorch's at::set_num_threads does not reach it: ranks x cores
// threads would fight over the host's cores. Each rank gets this host's cores shared by its ranks,
// unless OPENBLAS_NUM_THREADS says otherwise. Returns what the start-up line says about the BLAS.
std::string share_blas_threads(int local_world_size) {
  using SetThreads = void (*)(int);
  const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set == nullptr) return "BLAS not OpenBLAS";
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS"); env != nullptr && *env != '\0') {
    return std::string("OpenBLAS, OPENBLAS_NUM_THREADS=") + env;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(cores) / std::max(1, local_world_size));
  set(threads);
  return "OpenBLAS, " + std::to_string(threads) + " thread(s) per rank";
}

}  // namespace

Session::Session(int argc, char** argv) : config_(std::make_unique<Config>(default_config())) {
  start(argc, argv);  // reads the config from argv after MPI is up, so errors carry the rank
}

Session::Session(int argc, char** argv, const Config& config) : config_(std::make_unique<Config>(config)) {
  validate_config(*config_);
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
  const MpiProcessInfo mpi = start_mpi_runtime();
  rank_ = mpi.rank;
  world_size_ = mpi.world_size;
  host_ = hostname();
  detail::set_process_identity(rank_, world_size_, host_);

  if (argc > 0) {
    CommandLine cl = parse_command_line(argc, argv);
    *config_ = build_config(cl);
    args_ = cl.rest;
  }
  LogSettings log;
  log.level = parse_log_level(config_->logging().level(), "config field logging.level");
  log = parse_log_ranks(config_->logging().ranks(), log, "config field logging.ranks");
  set_log_settings(apply_log_env(log));

  MpiCommunicators comms = open_mpi_communicators([this](const std::string& name, int local_world_size) {
    local_world_size_ = local_world_size;  // comm_options reads it
    return comm_options(name);
  });
  local_rank_ = comms.local_rank;
  local_world_size_ = comms.local_world_size;
  world_ = std::move(comms.world);
  node_ = std::move(comms.node);
  check_launch_env();
  pick_device();
  const std::string blas = share_blas_threads(local_world_size_);
  // Before the program allocates anything: the tracking allocator counts only what comes after.
  apply_memory_config(config_->memory(), device_, rank_, world_size_);
  // runtime.seed: the same initial weights on every rank and in every run, unless the program
  // seeds again (the examples reseed per rank for training, so dropout masks differ).
  at::manual_seed(config_->runtime().seed());
  g_current = this;

  ZS_LOG(kInfo) << "zeroshard " << ZS_VERSION << ": " << world_size_ << " rank(s), " << local_world_size_
                << " on this host; device " << device_.str() << "; " << mpi.library << " ("
                << mpi.thread_level << "); launcher " << launch_env_.source
                << "; NCCL backend " << (nccl_compiled() ? "built" : "not built") << "; " << blas;
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
  const auto want = config_->runtime().device();
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
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_->comm().timeout_s() * 1000.0));
  o.abort_on_timeout = config_->comm().abort_on_timeout();
  o.check_signatures = config_->comm().check_signatures();
  // Polling before sleeping only pays when every rank has a core for it.
  const unsigned cores = std::thread::hardware_concurrency();
  const bool oversubscribed = cores > 0 && static_cast<unsigned>(local_world_size_) > cores;
  if (oversubscribed) o.poll_before_sleep = std::chrono::microseconds::zero();
  return o;
}

std::shared_ptr<Communicator> Session::device_world() {
  using Backend = config::CommConfig;
  const auto backend = config_->comm().backend();
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
  if (g_current == this) g_current = nullptr;
  stop_mpi_runtime();
}

}  // namespace zeroshard
