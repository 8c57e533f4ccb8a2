// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/core/session.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <thread>

#include "cuda_memory.h"
#include "device_select.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/comm/flight_recorder.h"
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

const char* to_string(DevicePolicy d) {
  switch (d) {
    case DevicePolicy::kAuto: return "AUTO";
    case DevicePolicy::kCpu: return "CPU";
    case DevicePolicy::kCuda: return "CUDA";
  }
  return "unknown device policy";
}

const char* to_string(CommBackend b) {
  switch (b) {
    case CommBackend::kAuto: return "AUTO";
    case CommBackend::kMpi: return "MPI";
    case CommBackend::kNccl: return "NCCL";
  }
  return "unknown comm backend";
}

namespace {
extern "C" void on_flight_dump_signal(int) { FlightRecorder::instance().request_dump(); }
struct sigaction g_previous_usr2;
bool g_usr2_installed = false;

// The flight recorder from comm.flight_recorder_*, and SIGUSR2 to ask it for a dump.
void start_flight_recorder(const SessionOptions& o, int rank, int world_size) {
  const int64_t entries = o.flight_recorder_entries;
  FlightRecorder::instance().configure(static_cast<size_t>(std::max<int64_t>(0, entries)), o.flight_recorder_dir,
                                       rank, world_size);
  if (entries <= 0 || g_usr2_installed) return;
  struct sigaction sa {};
  sa.sa_handler = on_flight_dump_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  g_usr2_installed = ::sigaction(SIGUSR2, &sa, &g_previous_usr2) == 0;
}
}  // namespace

Session::Session(int argc, char** argv, const SessionOptions& options) : options_(options) {
  for (int i = 0; i < argc; ++i) args_.emplace_back(argv[i] != nullptr ? argv[i] : "");
  start();
}

Session* Session::current() { return g_current; }

void Session::start() {
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

  set_log_settings(apply_log_env(options_.log));

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
  // The rank's GPU becomes current before anything touches CUDA (LibTorch's streams, NCCL, the
  // caching allocator's limit below), so no rank creates a context on another rank's GPU.
  if (device_.is_cuda()) detail::activate_cuda_device(device_.index());
  const std::string blas = share_blas_threads(local_world_size_);
  // Before the program allocates anything: the tracking allocator counts only what comes after.
  apply_memory_options(options_.memory, device_, rank_, world_size_);
  // The same initial weights on every rank and in every run, unless the program seeds again (the
  // training library reseeds per rank for training, so dropout masks differ).
  at::manual_seed(options_.seed);
  start_flight_recorder(options_, rank_, world_size_);
  g_current = this;

  ZS_LOG(kInfo) << "zeroshard " << ZS_VERSION << ": " << world_size_ << " rank(s), " << local_world_size_
                << " on this host; device " << device_.str() << "; " << mpi.library << " ("
                << mpi.thread_level << "); launcher " << launch_env_.source
                << "; NCCL backend " << (nccl_compiled() ? "built" : "not built") << "; " << blas;
  if (!world_->node_stages().empty()) {
    ZS_LOG(kInfo) << "all-gathers and reduce-scatters in two stages over " << world_->node_stages()
                  << ": between the nodes and inside each (comm.node_stages)";
  }
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
  const DevicePolicy want = options_.device;
  if (want == DevicePolicy::kCpu) {
    device_ = c10::Device(c10::kCPU);
    return;
  }
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  // What each rank of this host sees, agreed before any rank decides: ranks that decided apart
  // would leave some in a collective the others never join.
  const std::vector<HostGpuView> views = exchange_gpu_views(gpus);
  std::vector<int> counts;
  for (const HostGpuView& v : views) counts.push_back(v.visible);
  detail::check_same_gpu_counts(counts, host_);
  if (want == DevicePolicy::kAuto && gpus == 0) {
    device_ = c10::Device(c10::kCPU);
    return;
  }
  ZS_REQUIRE(gpus > 0, ConfigError, "runtime.device = CUDA (SessionOptions.device) but no CUDA device is visible on host ",
             host_, " (this LibTorch ", torch::cuda::is_available() ? "sees no GPU" : "has no CUDA support or no GPU",
             "); choose the device CPU or AUTO");
  const detail::DeviceChoice choice = detail::select_cuda_device(local_rank_, local_world_size_, gpus, host_);
  if (choice.one_per_rank) {
    std::vector<std::string> ids;
    for (const HostGpuView& v : views) ids.push_back(v.first_gpu_id);
    detail::check_distinct_devices(ids, host_);
  }
  device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(choice.index));
}

// One all-gather over the host's ranks (node()): each rank's GPU count and, when it sees exactly
// one GPU, that GPU's PCI bus id. A host with one rank needs no exchange.
std::vector<Session::HostGpuView> Session::exchange_gpu_views(int gpus) const {
  const std::string id = gpus == 1 ? detail::cuda_device_pci_id(0) : std::string();
  if (local_world_size_ == 1) return {{gpus, id}};
  constexpr int64_t kIdBytes = 32;  // cudaDeviceGetPCIBusId needs 13; room for longer domains
  constexpr int64_t kRecord = kIdBytes + 4;
  at::Tensor mine = at::zeros({kRecord}, at::kByte);
  auto* p = mine.data_ptr<uint8_t>();
  const int32_t count = gpus;
  std::memcpy(p, &count, 4);
  std::memcpy(p + 4, id.data(), std::min<size_t>(id.size(), kIdBytes - 1));
  at::Tensor all = at::zeros({kRecord * local_world_size_}, at::kByte);
  node_->all_gather_into(all, mine, "session.gpu_views")->wait();
  std::vector<HostGpuView> views;
  for (int r = 0; r < local_world_size_; ++r) {
    const uint8_t* q = all.data_ptr<uint8_t>() + r * kRecord;
    int32_t n = 0;
    std::memcpy(&n, q, 4);
    views.push_back({n, std::string(reinterpret_cast<const char*>(q + 4))});
  }
  return views;
}

CommOptions Session::comm_options(const std::string& name) const {
  CommOptions o = options_.comm;
  o.name = name;
  // Polling before sleeping only pays when every rank has a core for it.
  const unsigned cores = std::thread::hardware_concurrency();
  const bool oversubscribed = cores > 0 && static_cast<unsigned>(local_world_size_) > cores;
  if (oversubscribed) o.poll_before_sleep = std::chrono::microseconds::zero();
  return o;
}

std::shared_ptr<Communicator> Session::device_world() {
  const CommBackend backend = options_.comm_backend;
  if (device_.is_cpu()) {
    ZS_REQUIRE(backend != CommBackend::kNccl, ConfigError, "comm.backend = NCCL (SessionOptions.comm_backend) but "
               "the device is cpu; NCCL needs CUDA tensors. Use the backend AUTO or MPI");
    return world_;
  }
  ZS_REQUIRE(backend != CommBackend::kMpi, ConfigError, "comm.backend = MPI (SessionOptions.comm_backend) but the device is ",
             device_.str(), "; the MPI backend takes CPU tensors only. Use the backend AUTO or NCCL");
  if (!device_world_) device_world_ = make_nccl_communicator(world_, device_.index(), comm_options("world/nccl"));
  return device_world_;
}

Session::~Session() {
  if (g_usr2_installed) {
    ::sigaction(SIGUSR2, &g_previous_usr2, nullptr);
    g_usr2_installed = false;
  }
  FlightRecorder::instance().configure(0, "", 0, 1);
  device_world_.reset();
  world_.reset();
  node_.reset();
  if (g_current == this) g_current = nullptr;
  stop_mpi_runtime();
}

}  // namespace zeroshard
