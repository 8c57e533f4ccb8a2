// SPDX-License-Identifier: Apache-2.0
#pragma once
// The communicator: the only collectives the engine uses, behind one small interface.
//
// Contract shared by every backend:
// - Collectives are issued in the order the caller calls them, and every rank of the communicator
//   must call the same collectives in the same order (as with MPI and NCCL). Each call gets a
//   sequence number; with `CommOptions::check_signatures` the backend verifies, before running a
//   collective, that all ranks agree on its signature (op, dtype, count, root, tag) and otherwise
//   fails it on every rank with a message naming the first divergence.
// - Each call returns a Work handle at once. The communicator keeps the tensors passed to it alive
//   until the collective has completed, even if the caller drops the handle, and no longer: once
//   is_completed() is true (for CPU collectives: once wait() returns) it holds none of them
//   (a failed collective excepted).
// - Tensors must be defined, contiguous, on the backend's device (CPU for MPI, CUDA for NCCL), of a
//   dtype the backend supports, of the same dtype where two are passed, with the sizes each call
//   states, and non-overlapping between input and output (all_reduce and broadcast work in place;
//   all_gather_into may take in_shard = out_flat's own rank slice). The public calls check this
//   once, for every backend alike, and throw CommError at the call naming the communicator, the
//   call and the tensor ("communicator 'world' (mpi): all_gather_into: out_flat has 9 elements but
//   must have ..."); nothing is issued then, so the sequence numbers stay aligned.
// - A collective that runs longer than `CommOptions::timeout` is failed by the watchdog with a
//   CommTimeoutError naming rank, collective, tag and sequence number, plus what the other ranks
//   report being in; by default the watchdog then aborts the whole job (no rank hangs).
// - Thread-safety: one thread issues collectives on a given communicator at a time. Work handles
//   may be waited on from any thread.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>

namespace zeroshard {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* to_string(ReduceOp op);

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier, kReduceScatterInt8 };
const char* to_string(CollectiveKind kind);

// What a collective is, as the watchdog and the signature check see it.
struct CollectiveSignature {
  uint64_t seq = 0;  // per communicator, starting at 1
  CollectiveKind kind = CollectiveKind::kBarrier;
  c10::ScalarType dtype = c10::ScalarType::Byte;
  int64_t count = 0;  // elements of the input (shard for all_gather, flat for reduce_scatter)
  ReduceOp op = ReduceOp::kSum;
  int root = -1;     // broadcast only
  std::string tag;   // caller's label, e.g. the unit name
  std::string comm;  // communicator name, e.g. "world" or "world/split(1)"
  // e.g. "#12 all_gather(Float, count=4096, tag='blocks.3') on world"
  std::string to_string() const;
  // True when `other` is the same collective (seq, kind, dtype, count, op, root, tag).
  bool matches(const CollectiveSignature& other) const;
};

class Work {
 public:
  virtual ~Work() = default;

  // CPU (MPI) collectives: blocks the calling thread until the collective has finished; throws its
  // error if it failed, or CommTimeoutError if it is still running after `timeout`
  // (zero = the communicator's configured timeout).
  // CUDA (NCCL) collectives: does not block the host. It makes the caller's current CUDA stream
  // wait for the collective's completion event, so later work on that stream sees the result;
  // throws if the collective has already failed (watchdog timeout or NCCL async error).
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::zero()) = 0;

  // True once the collective finished or failed. Never blocks.
  virtual bool is_completed() = 0;

  // The collective's error, or null. Only meaningful once is_completed() is true.
  virtual std::exception_ptr exception() const = 0;

  virtual const CollectiveSignature& signature() const = 0;
};

struct CommOptions {
  std::string name = "world";
  // Watchdog: a collective still running after this long fails the job.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // After reporting a timeout, abort the whole job (MPI_Abort). Tests turn it off to inspect the error.
  bool abort_on_timeout = true;
  // Debug: before each collective, all-gather its signature and fail on the first divergence.
  bool check_signatures = false;
  // MPI only: largest element count passed to one MPI call (MPI counts are int). Larger messages
  // are split. Lowering it exercises the split path with small buffers.
  int64_t max_elements_per_call = 2147483647;
  // MPI only: reduce-scatter as zeroshard's pipelined ring over point-to-point messages (every
  // dtype but Bool); false: MPI_Reduce_scatter_block, Open MPI's own (a third of the bandwidth on
  // one host, docs/performance.md).
  bool reduce_scatter_ring = true;
  // MPI only: when the ranks span several nodes that hold the same number of consecutive ranks
  // each, all-gathers and (with reduce_scatter_ring) reduce-scatters run in two stages: all-gathers
  // between the ranks of equal local rank across the nodes, then inside each node over shared
  // memory; reduce-scatters inside the node first, then across. Each node's link then carries
  // (nodes - 1) / nodes of the gathered or reduced buffer each way, where one MPI_Iallgather over
  // all ranks sends it whole (Open MPI sends every shard to every rank of the other nodes) and the
  // ring (ranks - 1) / ranks of it. A reduce-scatter in stages takes a transposed copy of its input
  // and sums in another order (within the node, then across). false: one collective over all
  // ranks; other layouts always take that (node_stages() says which).
  bool node_stages = true;
  // MPI only, for tests on one host: every `node_size` consecutive ranks count as one node; 0: the
  // nodes MPI reports (MPI_COMM_TYPE_SHARED). Not passed on to split() communicators.
  int node_size = 0;
  // How long a waiting caller and an idle progress thread poll (yielding the core) before they
  // sleep. Saves two futex wake-ups per collective when ranks have cores of their own; the
  // Session sets it to zero when the node runs more ranks than it has cores (oversubscribed).
  std::chrono::microseconds poll_before_sleep{200};
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
  virtual const char* backend() const = 0;  // "mpi" or "nccl"
  // "N nodes x L ranks" when all-gathers and reduce-scatters run in two stages across nodes
  // (CommOptions::node_stages), empty when each runs as one collective over all ranks.
  virtual std::string node_stages() const { return ""; }
  // Where the tensors of its collectives live: cpu (MPI) or cuda:<index> (NCCL, with the index).
  virtual c10::Device device() const = 0;

  // out_flat[r*S : (r+1)*S] = in_shard of rank r, with S = in_shard.numel() the same on every rank
  // and out_flat.numel() == size() * S.
  std::shared_ptr<Work> all_gather_into(const at::Tensor& out_flat, const at::Tensor& in_shard,
                                        std::string_view tag = {});

  // out_shard = op over ranks of in_flat[rank*S : (rank+1)*S], with S = out_shard.numel() and
  // in_flat.numel() == size() * S.
  std::shared_ptr<Work> reduce_scatter_into(const at::Tensor& out_shard, const at::Tensor& in_flat,
                                            ReduceOp op, std::string_view tag = {});

  // reduce_scatter_into with the values travelling int8-quantized (zeroshard/comm/quantize.h: one
  // fp32 scale per `block` elements), ZeRO++'s quantized gradients: each rank encodes the part of
  // in_flat every other rank owns, an all-to-all delivers the parts, and each rank decodes and sums
  // the ones it received in fp32. A link then carries about a quarter of an fp32 reduce-scatter's
  // bytes. With two stages across nodes (CommOptions::node_stages) the parts are summed inside the
  // node first and the node sums encoded again for the all-to-all across the nodes, so each node's
  // link carries (nodes - 1) / nodes of the quantized buffer, as a flat all-to-all would carry
  // (local ranks) x as much. Blocks are counted from the start of each shard. Error of each result
  // element, before kAvg's division: at most the sum over ranks of absmax / 254 of the block the
  // element sits in on that rank (a block of zeros stays exact); with two stages, also absmax / 254
  // of each node sum's block. A block holding an infinity or NaN on any rank is NaN. Same arguments as
  // reduce_scatter_into, floating dtypes, op kSum or kAvg; the MPI backend only (CommError on others).
  std::shared_ptr<Work> reduce_scatter_int8_into(const at::Tensor& out_shard, const at::Tensor& in_flat, ReduceOp op,
                                                 int64_t block, std::string_view tag = {});

  // In place: tensor = op over ranks of tensor.
  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op, std::string_view tag = {});

  // In place: tensor = root's tensor.
  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, std::string_view tag = {});

  std::shared_ptr<Work> barrier(std::string_view tag = {});

  // Collective over this communicator: ranks passing the same color form a new communicator,
  // ordered by (key, rank). A negative color returns nullptr (the rank joins no group).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

 protected:
  // What the backend takes, for the shared checks of the public calls.
  // Empty when `t` (a defined tensor) is on a device this communicator can use; otherwise the
  // requirement, e.g. "the MPI backend takes CPU tensors".
  virtual std::string device_requirement(const at::Tensor& t) const = 0;
  virtual bool supports_dtype(c10::ScalarType dtype) const = 0;
  virtual const char* supported_dtypes() const = 0;  // "Float, Double, ..."

  // The collectives, called only with arguments that passed the checks. `in_place`: in_shard is
  // out_flat's own rank slice.
  virtual std::shared_ptr<Work> run_all_gather(const at::Tensor& out_flat, const at::Tensor& in_shard,
                                               bool in_place, std::string_view tag) = 0;
  virtual std::shared_ptr<Work> run_reduce_scatter(const at::Tensor& out_shard, const at::Tensor& in_flat,
                                                   ReduceOp op, std::string_view tag) = 0;
  // The default refuses: a backend without a quantized reduce-scatter.
  virtual std::shared_ptr<Work> run_reduce_scatter_int8(const at::Tensor& out_shard, const at::Tensor& in_flat,
                                                        ReduceOp op, int64_t block, std::string_view tag);
  virtual std::shared_ptr<Work> run_all_reduce(const at::Tensor& tensor, ReduceOp op, std::string_view tag) = 0;
  virtual std::shared_ptr<Work> run_broadcast(const at::Tensor& tensor, int root, std::string_view tag) = 0;
  virtual std::shared_ptr<Work> run_barrier(std::string_view tag) = 0;

 private:
  class ArgCheck;
};

}  // namespace zeroshard
