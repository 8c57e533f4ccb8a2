// SPDX-License-Identifier: Apache-2.0
// The NCCL backend. Contracts in nccl_communicator.h and zeroshard/comm/communicator.h.
#include "nccl_communicator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorOptions.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "cuda_stream.h"
#include "nccl_types.h"
#include "signature_check.h"
#include "watchdog.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/comm/check_cuda.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard::comm {
namespace {

using detail::concat;

// How often the destructor re-polls in-flight collectives, and how long it waits for the
// kernels of an aborted communicator to leave the buffers.
constexpr std::chrono::microseconds kDrainPoll{200};
constexpr std::chrono::seconds kAbortedDrainLimit{10};
// How long an abort waits for an NCCL call in progress on another thread.
constexpr std::chrono::seconds kAbortLockWait{2};

// Only for tensors whose dtype passed the public call's check (supports_dtype).
NcclType nccl_type(const at::Tensor& t) { return *to_nccl_type(t.scalar_type()); }

cudaEvent_t new_event() {
  cudaEvent_t ev = nullptr;
  ZS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  return ev;
}

std::exception_ptr comm_error(std::string message, int line) {
  return std::make_exception_ptr(CommError(std::move(message), __FILE__, line));
}

}  // namespace

std::optional<NcclType> to_nccl_type(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return NcclType{ncclFloat32};
    case c10::ScalarType::Double: return NcclType{ncclFloat64};
    case c10::ScalarType::Half: return NcclType{ncclFloat16};
    case c10::ScalarType::BFloat16: return NcclType{ncclBfloat16};
    case c10::ScalarType::Int: return NcclType{ncclInt32};
    case c10::ScalarType::Long: return NcclType{ncclInt64};
    case c10::ScalarType::Byte: return NcclType{ncclUint8};
    case c10::ScalarType::Char: return NcclType{ncclInt8};
    case c10::ScalarType::Bool: return NcclType{ncclUint8};
    case c10::ScalarType::Short: return NcclType{ncclUint8, 2, /*reducible=*/false};
    default: return std::nullopt;
  }
}

ncclRedOp_t to_nccl_op(ReduceOp op, c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Bool) return op == ReduceOp::kMin ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kAvg: return ncclAvg;
  }
  ZS_THROW(CommError, "to_nccl_op: unknown ReduceOp ", static_cast<int>(op));
}

// ---------------------------------------------------------------------------------------------
// NcclCommHandle

NcclCommHandle::NcclCommHandle(ncclComm_t comm, std::string name)
    : comm_(comm), name_(std::move(name)) {}

NcclCommHandle::~NcclCommHandle() {
  std::lock_guard<std::timed_mutex> lock(comm_mu_);
  if (aborted_.load() || comm_ == nullptr) return;
  // All collectives have completed (the communicator drained them). On recent NCCL this is an
  // intra-node collective with the other ranks' destroy: ranks destroy communicators in one order.
  const ncclResult_t rc = ncclCommDestroy(comm_);
  comm_ = nullptr;
  if (rc != ncclSuccess) {
    try {
      ZS_LOG(kWarn) << "ncclCommDestroy of communicator '" << name_
                    << "' failed: " << ncclGetErrorString(rc);
    } catch (...) {
    }
  }
}

void NcclCommHandle::throw_if_aborted(const char* what) const {
  if (!aborted_.load()) return;
  ZS_THROW(CommError, "cannot run ", what, ": communicator '", name_, "' was aborted after ",
           abort_reason(),
           ". An aborted NCCL communicator cannot be used again; create a new one "
           "on every rank");
}

std::string NcclCommHandle::abort_reason() const {
  std::lock_guard<std::mutex> lock(reason_mu_);
  return abort_reason_;
}

void NcclCommHandle::abort(const std::string& reason) noexcept {
  std::unique_lock<std::timed_mutex> lock(comm_mu_, std::defer_lock);
  if (!lock.try_lock_for(kAbortLockWait)) {
    try {
      ZS_LOG(kWarn) << "an NCCL call on communicator '" << name_ << "' has been blocked for "
                    << kAbortLockWait.count() << " s; aborting the communicator under it";
    } catch (...) {
    }
  }
  abort_locked(reason);
}

void NcclCommHandle::abort_locked(const std::string& reason) noexcept {
  try {
    std::lock_guard<std::mutex> lock(reason_mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
  } catch (...) {
  }
  // Set before the abort: a Work that sees its event complete and then `aborted_` false knows
  // the collective finished before the abort started (NcclWork::poll relies on this order).
  if (aborted_.exchange(true)) return;
  const ncclResult_t rc = ncclCommAbort(comm_);
  comm_ = nullptr;
  try {
    ZS_LOG(kError) << "aborted NCCL communicator '" << name_ << "' after " << reason
                   << (rc == ncclSuccess
                           ? ""
                           : concat(" (ncclCommAbort: ", ncclGetErrorString(rc), ")"));
  } catch (...) {
  }
}

std::string NcclCommHandle::take_async_error() {
  std::unique_lock<std::timed_mutex> lock(comm_mu_, std::try_to_lock);
  if (!lock.owns_lock() || aborted_.load()) return {};
  ncclResult_t async = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
  if (rc != ncclSuccess) async = rc;
  if (async == ncclSuccess || async == ncclInProgress) return {};
  const char* last = ncclGetLastError(comm_);
  std::string what =
      concat("an asynchronous NCCL error on communicator '", name_,
             "': ", ncclGetErrorString(async), (last && *last) ? concat(" (", last, ")") : "");
  abort_locked(what);
  return what;
}

// ---------------------------------------------------------------------------------------------
// NcclWork

NcclWork::NcclWork(CollectiveSignature sig, std::vector<at::Tensor> keep_alive,
                   std::chrono::milliseconds timeout, std::shared_ptr<NcclCommHandle> handle,
                   int device, cudaEvent_t done_event)
    : WorkBase(std::move(sig), std::move(keep_alive), timeout),
      handle_(std::move(handle)),
      device_(device),
      done_event_(done_event) {}

NcclWork::~NcclWork() {
  // Safe even while the GPU has not reached the event: CUDA releases it once it has.
  if (done_event_ != nullptr) (void)cudaEventDestroy(done_event_);
}

void NcclWork::wait(std::chrono::milliseconds /*timeout*/) {
  poll();
  rethrow_if_failed();
  if (done()) return;  // the GPU has passed the completion event: nothing left to order
  CudaDeviceGuard guard(device_);
  ZS_CUDA_CHECK(cudaStreamWaitEvent(current_cuda_stream(device_), done_event_, 0));
}

void NcclWork::poll() {
  if (done()) return;
  try {
    CudaDeviceGuard guard(device_);
    const cudaError_t q = cudaEventQuery(done_event_);
    if (q == cudaSuccess) {
      // Read `aborted` after the query: an abort that started earlier may be why the event passed.
      return handle_->aborted() ? fail(aborted_error()) : complete();
    }
    if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();  // clear a non-sticky error so later CUDA calls do not report it
      return fail(std::make_exception_ptr(
          CudaError(concat("cudaEventQuery on the completion event of ", signature().to_string(),
                           " failed: ", cudaGetErrorName(q), " (", cudaGetErrorString(q), ")"),
                    __FILE__, __LINE__)));
    }
    if (handle_->aborted()) return fail(aborted_error());
    const std::string async = handle_->take_async_error();
    if (!async.empty()) {
      fail(comm_error(concat(signature().to_string(), " failed: ", async,
                             ". The communicator was aborted; NCCL_DEBUG=WARN tells more"),
                      __LINE__));
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

std::exception_ptr NcclWork::aborted_error() const {
  return comm_error(concat(signature().to_string(), " did not complete: communicator '",
                           handle_->name(), "' was aborted after ", handle_->abort_reason()),
                    __LINE__);
}

void NcclWork::on_timeout() {
  try {
    handle_->abort(concat("a watchdog timeout of ", signature().to_string(), " (timeout ",
                          comm_timeout().count(), " ms)"));
  } catch (...) {
    handle_->abort("a watchdog timeout");
  }
}

bool NcclWork::finished_on_device() {
  const cudaError_t q = cudaEventQuery(done_event_);
  if (q == cudaErrorNotReady) return false;
  if (q != cudaSuccess) (void)cudaGetLastError();  // a broken event will never complete
  return true;
}

// ---------------------------------------------------------------------------------------------
// NcclCommunicator: construction and teardown

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclCommHandle> handle,
                                   std::shared_ptr<Communicator> bootstrap, int device,
                                   CommOptions options)
    : handle_(std::move(handle)),
      bootstrap_(std::move(bootstrap)),
      device_(device),
      options_(std::move(options)),
      rank_(bootstrap_->rank()),
      size_(bootstrap_->size()) {
  try {
    CudaDeviceGuard guard(device_);
    int least = 0;
    int greatest = 0;
    ZS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    ZS_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    ready_event_ = new_event();
    barrier_buf_ = at::zeros({1}, c10::TensorOptions()
                                      .dtype(c10::ScalarType::Int)
                                      .device(c10::Device(c10::DeviceType::CUDA,
                                                          static_cast<c10::DeviceIndex>(device_))));
  } catch (...) {
    release_cuda_objects();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  drain_inflight();
  release_cuda_objects();
}

void NcclCommunicator::drain_inflight() noexcept {
  try {
    CudaDeviceGuard guard(device_);
    for (const auto& work : inflight_) {
      std::chrono::steady_clock::time_point abort_deadline{};
      while (!work->finished_on_device()) {
        // Polls: NCCL async errors abort the comm, and the watchdog aborts it on a timeout.
        work->is_completed();
        if (handle_->aborted()) {
          const auto now = std::chrono::steady_clock::now();
          if (abort_deadline == std::chrono::steady_clock::time_point{}) {
            abort_deadline = now + kAbortedDrainLimit;
          } else if (now > abort_deadline) {
            ZS_LOG(kWarn) << "communicator '" << options_.name << "' destroyed while aborted "
                          << work->signature().to_string() << " still runs on the GPU";
            break;
          }
        } else if (work->done() && work->exception() != nullptr) {
          break;  // failed without an abort (a CUDA error): nothing more will happen
        }
        std::this_thread::sleep_for(kDrainPoll);
      }
      work->is_completed();
    }
  } catch (...) {
  }
  inflight_.clear();
}

void NcclCommunicator::release_cuda_objects() noexcept {
  try {
    barrier_buf_ = at::Tensor();
  } catch (...) {
  }
  if (ready_event_ != nullptr) (void)cudaEventDestroy(ready_event_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  ready_event_ = nullptr;
  stream_ = nullptr;
}

// ---------------------------------------------------------------------------------------------
// NcclCommunicator: the shared path

template <typename LaunchFn>
std::shared_ptr<Work> NcclCommunicator::run_collective(CollectiveSignature sig,
                                                       std::vector<at::Tensor> tensors,
                                                       LaunchFn&& launch) {
  CudaDeviceGuard guard(device_);
  prune_completed();
  handle_->throw_if_aborted(to_string(sig.kind));
  sig.seq = ++seq_;
  if (options_.check_signatures) check_signatures_agree(*bootstrap_, sig);

  // Order after the caller's queued work without blocking the host.
  ZS_CUDA_CHECK(cudaEventRecord(ready_event_, current_cuda_stream(device_)));
  ZS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_event_, 0));
  auto work = std::make_shared<NcclWork>(std::move(sig), std::move(tensors), options_.timeout,
                                         handle_, device_, new_event());
  handle_->with_comm(to_string(work->signature().kind),
                     [&](ncclComm_t comm) { launch(comm, stream_); });
  ZS_CUDA_CHECK(cudaEventRecord(work->done_event(), stream_));
  work->mark_started();

  inflight_.push_back(work);
  Watchdog::instance().track(work, options_.abort_on_timeout);
  return work;
}

void NcclCommunicator::prune_completed() {
  inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(),
                                 [](const std::shared_ptr<NcclWork>& w) {
                                   return w->is_completed() && w->finished_on_device();
                                 }),
                  inflight_.end());
}

CollectiveSignature NcclCommunicator::make_signature(CollectiveKind kind, c10::ScalarType dtype,
                                                     int64_t count, ReduceOp op, int root,
                                                     std::string_view tag) const {
  CollectiveSignature sig;
  sig.kind = kind;
  sig.dtype = dtype;
  sig.count = count;
  sig.op = op;
  sig.root = root;
  sig.tag = std::string(tag);
  sig.comm = options_.name;
  return sig;
}

std::string NcclCommunicator::where(const char* op) const {
  return concat(op, " on nccl communicator '", options_.name, "' (rank ", rank_, " of ", size_,
                ", cuda:", device_, ")");
}

std::string NcclCommunicator::device_requirement(const at::Tensor& t) const {
  if (t.is_cuda() && t.device().index() == device_) return {};
  return concat("the NCCL backend takes CUDA tensors on cuda:", device_, " (this communicator's device)");
}

bool NcclCommunicator::supports_dtype(c10::ScalarType dtype) const { return to_nccl_type(dtype).has_value(); }

const char* NcclCommunicator::supported_dtypes() const { return kNcclSupportedDtypes; }

ncclRedOp_t NcclCommunicator::nccl_op(ReduceOp op, c10::ScalarType dtype, const char* call) const {
  ZS_REQUIRE(to_nccl_type(dtype)->reducible, CommError, where(call), ": dtype ", c10::toString(dtype),
             " cannot be reduced by NCCL (it has no 16-bit integer type; broadcast and all-gather move it as "
             "bytes). Reduce it as Int (.to(at::kInt)) instead");
  return to_nccl_op(op, dtype);
}

// ---------------------------------------------------------------------------------------------
// NcclCommunicator: the collectives (each one fills a signature and hands a lambda over)

// In place (in_shard is out_flat's own rank slice) NCCL needs nothing else: it recognises
// sendbuff == recvbuff + rank * count.
std::shared_ptr<Work> NcclCommunicator::run_all_gather(const at::Tensor& out_flat, const at::Tensor& in_shard,
                                                       bool /*in_place*/, std::string_view tag) {
  const void* send = in_shard.data_ptr();
  void* recv = out_flat.data_ptr();
  const NcclType nt = nccl_type(in_shard);
  const size_t count = static_cast<size_t>(in_shard.numel() * nt.per_element);
  const ncclDataType_t dt = nt.type;
  return run_collective(make_signature(CollectiveKind::kAllGather, in_shard.scalar_type(),
                                       in_shard.numel(), ReduceOp::kSum, -1, tag),
                        {out_flat, in_shard}, [=](ncclComm_t comm, cudaStream_t s) {
                          ZS_NCCL_CHECK(ncclAllGather(send, recv, count, dt, comm, s), comm);
                        });
}

std::shared_ptr<Work> NcclCommunicator::run_reduce_scatter(const at::Tensor& out_shard, const at::Tensor& in_flat,
                                                           ReduceOp op, std::string_view tag) {
  const ncclRedOp_t red = nccl_op(op, in_flat.scalar_type(), "reduce_scatter_into");
  const void* send = in_flat.data_ptr();
  void* recv = out_shard.data_ptr();
  const size_t count = static_cast<size_t>(out_shard.numel());
  const ncclDataType_t dt = nccl_type(in_flat).type;
  return run_collective(make_signature(CollectiveKind::kReduceScatter, in_flat.scalar_type(),
                                       in_flat.numel(), op, -1, tag),
                        {out_shard, in_flat}, [=](ncclComm_t comm, cudaStream_t s) {
                          ZS_NCCL_CHECK(ncclReduceScatter(send, recv, count, dt, red, comm, s),
                                        comm);
                        });
}

std::shared_ptr<Work> NcclCommunicator::run_all_reduce(const at::Tensor& tensor, ReduceOp op,
                                                       std::string_view tag) {
  const ncclRedOp_t red = nccl_op(op, tensor.scalar_type(), "all_reduce");
  void* buf = tensor.data_ptr();
  const size_t count = static_cast<size_t>(tensor.numel());
  const ncclDataType_t dt = nccl_type(tensor).type;
  return run_collective(
      make_signature(CollectiveKind::kAllReduce, tensor.scalar_type(), tensor.numel(), op, -1, tag),
      {tensor}, [=](ncclComm_t comm, cudaStream_t s) {
        ZS_NCCL_CHECK(ncclAllReduce(buf, buf, count, dt, red, comm, s), comm);
      });
}

std::shared_ptr<Work> NcclCommunicator::run_broadcast(const at::Tensor& tensor, int root,
                                                      std::string_view tag) {
  void* buf = tensor.data_ptr();
  const NcclType nt = nccl_type(tensor);
  const size_t count = static_cast<size_t>(tensor.numel() * nt.per_element);
  const ncclDataType_t dt = nt.type;
  return run_collective(make_signature(CollectiveKind::kBroadcast, tensor.scalar_type(),
                                       tensor.numel(), ReduceOp::kSum, root, tag),
                        {tensor}, [=](ncclComm_t comm, cudaStream_t s) {
                          ZS_NCCL_CHECK(ncclBroadcast(buf, buf, count, dt, root, comm, s), comm);
                        });
}

// NCCL has no barrier: an all-reduce of one int32. Like every NCCL Work, wait() orders the
// caller's stream after it; it does not block the host.
std::shared_ptr<Work> NcclCommunicator::run_barrier(std::string_view tag) {
  void* buf = barrier_buf_.data_ptr();
  return run_collective(
      make_signature(CollectiveKind::kBarrier, c10::ScalarType::Int, 1, ReduceOp::kSum, -1, tag),
      {barrier_buf_}, [=](ncclComm_t comm, cudaStream_t s) {
        ZS_NCCL_CHECK(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, s), comm);
      });
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  handle_->throw_if_aborted("split");
  std::shared_ptr<Communicator> sub = bootstrap_->split(color, key);
  if (color < 0 || sub == nullptr) return nullptr;
  CommOptions options = options_;
  options.name = concat(options_.name, "/split(", color, ")");
  return make_nccl_communicator(sub, device_, options);
}

// ---------------------------------------------------------------------------------------------
// Creation

namespace {

// Why this process cannot run NCCL on `device`, or empty.
std::string local_device_problem(int device) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return concat("CUDA device ", device, " is not available: cudaGetDeviceCount failed with ",
                  cudaGetErrorName(rc), " (", cudaGetErrorString(rc),
                  "), so the device count is 0. Run on a GPU machine with a working NVIDIA driver");
  }
  if (device < 0 || device >= count) {
    return concat("CUDA device ", device, " does not exist: the device count is ", count,
                  count > 0 ? concat(" (valid devices 0..", count - 1, ")") : std::string(),
                  ". Check CUDA_VISIBLE_DEVICES and how ranks map to devices");
  }
  if (!torch_has_cuda()) {
    return "this build's LibTorch has no CUDA (no c10_cuda), so there is no current CUDA stream to "
           "order collectives with. Rebuild against a CUDA-enabled LibTorch";
  }
  return {};
}

// Every rank checks its device; all ranks learn whether any failed, so none waits in the NCCL
// bootstrap for a rank that already gave up. Throws CommError on every rank when one failed.
void agree_on_device(Communicator& bootstrap, int device, const std::string& name) {
  const std::string problem = local_device_problem(device);
  at::Tensor first_bad = at::empty({1}, c10::TensorOptions().dtype(c10::ScalarType::Int));
  *first_bad.data_ptr<int32_t>() = problem.empty() ? bootstrap.size() : bootstrap.rank();
  bootstrap.all_reduce(first_bad, ReduceOp::kMin, "nccl.bootstrap.device")->wait();
  const int bad = *first_bad.data_ptr<int32_t>();
  ZS_REQUIRE(problem.empty(), CommError, "cannot create NCCL communicator '", name, "' at rank ",
             bootstrap.rank(), " of ", bootstrap.size(), " on CUDA device ", device, ": ", problem);
  ZS_REQUIRE(bad >= bootstrap.size(), CommError, "cannot create NCCL communicator '", name,
             "': rank ", bad, " of '", bootstrap.name(),
             "' cannot use its CUDA device (its own error says why); every rank stops here");
}

// Rank 0 creates the NCCL unique id and broadcasts it with one status byte, so that a failure on
// rank 0 fails every rank instead of leaving them waiting in ncclCommInitRank.
ncclUniqueId share_unique_id(Communicator& bootstrap, const std::string& name) {
  constexpr int64_t kIdBytes = sizeof(ncclUniqueId);
  at::Tensor buf = at::zeros({kIdBytes + 1}, c10::TensorOptions().dtype(c10::ScalarType::Byte));
  uint8_t* bytes = buf.data_ptr<uint8_t>();
  std::string problem;
  if (bootstrap.rank() == 0) {
    ncclUniqueId id;
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc == ncclSuccess) {
      std::memcpy(bytes, &id, kIdBytes);
      bytes[kIdBytes] = 1;
    } else {
      problem = concat("ncclGetUniqueId failed: ", ncclGetErrorString(rc), " (",
                       ncclGetLastError(nullptr), ")");
    }
  }
  bootstrap.broadcast(buf, 0, "nccl.bootstrap")->wait();
  bytes = buf.data_ptr<uint8_t>();
  ZS_REQUIRE(problem.empty(), CommError, "cannot create NCCL communicator '", name, "': ", problem);
  ZS_REQUIRE(bytes[kIdBytes] == 1, CommError, "cannot create NCCL communicator '", name,
             "': rank 0 of '", bootstrap.name(),
             "' failed to create the NCCL unique id (see its error)");
  ncclUniqueId id;
  std::memcpy(&id, bytes, kIdBytes);
  return id;
}

ncclComm_t init_comm(const Communicator& bootstrap, const ncclUniqueId& id, int device,
                     const std::string& name) {
  CudaDeviceGuard guard(device);
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
  ZS_REQUIRE(rc == ncclSuccess, CommError, "ncclCommInitRank for communicator '", name, "' (rank ",
             bootstrap.rank(), " of ", bootstrap.size(), ", cuda:", device,
             ") failed: ", ncclGetErrorString(rc), " (", ncclGetLastError(nullptr),
             "). Run with NCCL_DEBUG=WARN (or INFO) for NCCL's own log");
  return comm;
}

}  // namespace
}  // namespace zeroshard::comm

namespace zeroshard {

bool nccl_compiled() { return true; }

std::shared_ptr<Communicator> make_nccl_communicator(const std::shared_ptr<Communicator>& bootstrap,
                                                     int cuda_device, const CommOptions& options) {
  ZS_REQUIRE(bootstrap != nullptr, CommError, "cannot create NCCL communicator '", options.name,
             "': the bootstrap communicator is null");
  comm::agree_on_device(*bootstrap, cuda_device, options.name);
  const ncclUniqueId id = comm::share_unique_id(*bootstrap, options.name);
  ncclComm_t raw = comm::init_comm(*bootstrap, id, cuda_device, options.name);
  auto handle = std::make_shared<comm::NcclCommHandle>(raw, options.name);
  return std::make_shared<comm::NcclCommunicator>(std::move(handle), bootstrap, cuda_device,
                                                  options);
}

}  // namespace zeroshard
