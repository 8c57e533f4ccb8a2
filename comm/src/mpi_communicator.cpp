// SPDX-License-Identifier: Apache-2.0
#include "mpi_communicator.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "mpi_ring.h"
#include "mpi_util.h"
#include "signature_check.h"
#include "watchdog.h"
#include "work_base.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/comm/quantize.h"

namespace zeroshard::comm {
namespace {

using Body = std::function<void()>;

// How the progress thread waits for a request: MPI_Test in a tight loop for the first
// `t_busy_poll` (set per progress thread from CommOptions::poll_before_sleep), then MPI_Test with
// sched_yield between tests. Open MPI's MPI_Wait busy-polls a core for the whole wait, and a
// collective often waits for a slower rank to arrive: that core is then taken from the training
// computation. Yielding hands the core to runnable compute threads and costs nothing on an idle
// core (sleeping instead cost up to ~100 us per completion: 0.48x raw MPI at 4 MiB).
thread_local std::chrono::microseconds t_busy_poll{200};

int wait_request(MPI_Request* req) {
  const auto busy_until = std::chrono::steady_clock::now() + t_busy_poll;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    if (std::chrono::steady_clock::now() >= busy_until) std::this_thread::yield();
  }
}

// Shared between the communicator, its progress thread and its Work handles, so a Work or the
// thread may outlive the communicator object (e.g. a collective stuck after a timeout).
struct Queue;

class MpiWork final : public WorkBase {
 public:
  MpiWork(CollectiveSignature sig, std::vector<at::Tensor> keep, std::chrono::milliseconds timeout,
          std::chrono::microseconds poll, Body body, std::weak_ptr<Queue> queue)
      : WorkBase(std::move(sig), std::move(keep), timeout), poll_(poll), body_(std::move(body)), queue_(std::move(queue)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (!block_until_done(timeout, poll_)) {
      ZS_THROW(CommTimeoutError, "Work::wait gave up after ", timeout.count(), " ms; ",
               signature().to_string(), " is still in flight (the communicator still needs it to "
               "complete on every rank)");
    }
    rethrow_if_failed();
  }

  void on_timeout() override;
  // Runs the collective on the progress thread and drops the body (with the tensors it captured)
  // before complete() can mark it done: the watchdog keeps finished Work handles until its next
  // scan, and their buffers must not live that long.
  void run() {
    Body body = std::move(body_);
    body_ = nullptr;
    body();
  }

 private:
  std::chrono::microseconds poll_;
  Body body_;
  std::weak_ptr<Queue> queue_;
};

struct Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<MpiWork>> pending;
  std::atomic<size_t> queued{0};  // pending.size(), readable without the lock
  bool stop = false;
  std::string broken;  // why the communicator can no longer be used; empty while healthy

  // Fails every queued collective; they can never run on a broken communicator.
  void break_with(const std::string& why) {
    std::deque<std::shared_ptr<MpiWork>> drop;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (broken.empty()) broken = why;
      drop.swap(pending);
      queued = 0;
    }
    for (auto& w : drop) {
      w->fail(std::make_exception_ptr(CommError(
          detail::concat(w->signature().to_string(), " was not run: ", why), __FILE__, __LINE__)));
    }
  }
};

void MpiWork::on_timeout() {
  if (auto q = queue_.lock()) {
    q->break_with(detail::concat("the communicator is broken: ", signature().to_string(), " timed out"));
  }
}

size_t element_size(const at::Tensor& t) { return t.element_size(); }

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, CommOptions options) : comm_(comm), opts_(std::move(options)) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    ZS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    ZS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    ZS_REQUIRE(opts_.max_elements_per_call >= 1 && opts_.max_elements_per_call <= INT_MAX, CommError,
               "CommOptions::max_elements_per_call = ", opts_.max_elements_per_call,
               " is out of range; allowed: [1, ", INT_MAX, "]");
    if (opts_.node_stages) find_nodes();
    queue_ = std::make_shared<Queue>();
    worker_ = std::thread([q = queue_, comm = comm_, check = opts_.check_signatures, poll = opts_.poll_before_sleep] {
      progress_loop(q, comm, check, poll);
    });
  }

  ~MpiCommunicator() override {
    bool broken;
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->stop = true;
      broken = !queue_->broken.empty();
    }
    queue_->cv.notify_all();
    if (broken) {
      // The progress thread may be stuck in a collective that never completes; it owns the queue
      // and leaks the MPI communicator rather than hang the process here.
      worker_.detach();
      return;
    }
    worker_.join();
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
    if (cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return opts_.name; }
  const char* backend() const override { return "mpi"; }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  std::string node_stages() const override {
    if (node_ == MPI_COMM_NULL) return "";
    return detail::concat(size_ / local_size_, " nodes x ", local_size_, " ranks");
  }

 protected:
  std::string device_requirement(const at::Tensor& t) const override {
    if (t.device().is_cpu()) return {};
    return "the MPI backend takes CPU tensors (CUDA tensors go through the NCCL communicator, "
           "Session::device_world())";
  }
  bool supports_dtype(c10::ScalarType dtype) const override { return mpi_supports(dtype); }
  const char* supported_dtypes() const override {
    return "Float, Double, Half, BFloat16, Int, Long, Short, Byte, Char, Bool";
  }

  std::shared_ptr<Work> run_all_gather(const at::Tensor& out, const at::Tensor& in, bool in_place,
                                       std::string_view tag) override {
    const int64_t shard = in.numel();
    MPI_Datatype type = mpi_datatype(in.scalar_type());
    char* out_p = static_cast<char*>(out.data_ptr());
    const char* in_p = static_cast<const char*>(in.data_ptr());
    const int64_t max = opts_.max_elements_per_call;
    const size_t esize = element_size(in);
    MPI_Comm comm = comm_;
    const Stages stages{cross_, node_, local_rank_, local_size_, size_ / std::max(local_size_, 1)};
    return enqueue(signature(CollectiveKind::kAllGather, in, shard, ReduceOp::kSum, -1, tag), {out, in}, [=] {
      if (stages.node != MPI_COMM_NULL) {
        all_gather_in_stages(stages, out_p, in_place ? nullptr : in_p, shard, esize, type, max);
      } else {
        all_gather_chunked(comm, out_p, in_place ? nullptr : in_p, shard, esize, type, max);
      }
    });
  }

  std::shared_ptr<Work> run_reduce_scatter(const at::Tensor& out, const at::Tensor& in, ReduceOp op,
                                           std::string_view tag) override {
    const int64_t shard = out.numel();
    MPI_Datatype type = mpi_datatype(in.scalar_type());
    MPI_Op mop = mpi_op(op, in.scalar_type());
    const int64_t max = opts_.max_elements_per_call;
    MPI_Comm comm = comm_;
    const int n = size_;
    at::Tensor out_t = out, in_t = in;
    const bool ring = opts_.reduce_scatter_ring && ring_supports(in.scalar_type(), op);
    const Stages stages{cross_, node_, local_rank_, local_size_, size_ / std::max(local_size_, 1)};
    return enqueue(signature(CollectiveKind::kReduceScatter, in, in.numel(), op, -1, tag), {out, in}, [=]() mutable {
      if (ring && stages.node != MPI_COMM_NULL) {
        // Inside the node first: local rank j gets the node's sum of the blocks of local rank j on
        // every node (block m x L + j, gathered into one column by the copy), then across the
        // nodes: node m's rank j gets the sum of block m x L + j.
        const at::Tensor columns = in_t.view({stages.nodes, stages.local_size, shard}).transpose(0, 1).contiguous();
        at::Tensor partial = at::empty({stages.nodes * shard}, in_t.options());
        reduce_scatter_ring(stages.node, partial, columns.view({-1}), op, max, &wait_request);
        reduce_scatter_ring(stages.cross, out_t, partial, op, max, &wait_request);
      } else if (ring) {
        reduce_scatter_ring(comm, out_t, in_t, op, max, &wait_request);
      } else {
        reduce_scatter_chunked(comm, out_t, in_t, shard, n, type, mop, max);
      }
      if (op == ReduceOp::kAvg) out_t.div_(n);
    });
  }

  std::shared_ptr<Work> run_reduce_scatter_int8(const at::Tensor& out, const at::Tensor& in, ReduceOp op, int64_t block,
                                                std::string_view tag) override {
    const int64_t shard = out.numel(), max = opts_.max_elements_per_call;
    MPI_Comm comm = comm_;
    const int n = size_;
    at::Tensor out_t = out, in_t = in;
    const Stages stages{cross_, node_, local_rank_, local_size_, size_ / std::max(local_size_, 1)};
    return enqueue(signature(CollectiveKind::kReduceScatterInt8, in, in.numel(), op, -1, tag), {out, in}, [=]() mutable {
      at::Tensor sum;
      if (stages.node != MPI_COMM_NULL) {
        // As run_reduce_scatter's stages: local rank j sums the node's column j (block m x L + j
        // of every node m), then node m's rank j sums block m x L + j of the node sums.
        const at::Tensor columns = in_t.view({stages.nodes, stages.local_size, shard}).transpose(0, 1);
        const at::Tensor partial = all_to_all_int8_sum(
            stages.node, stages.local_size, [&](int j) { return columns[j].reshape({-1}); }, stages.nodes, shard,
            block, max);
        sum = all_to_all_int8_sum(
            stages.cross, stages.nodes, [&](int m) { return partial.narrow(0, m * shard, shard); }, 1, shard, block,
            max);
      } else {
        sum = all_to_all_int8_sum(comm, n, [&](int r) { return in_t.narrow(0, r * shard, shard); }, 1, shard, block,
                                  max);
      }
      if (op == ReduceOp::kAvg) sum.div_(n);
      out_t.copy_(sum);
    });
  }

  std::shared_ptr<Work> run_all_reduce(const at::Tensor& t, ReduceOp op, std::string_view tag) override {
    MPI_Datatype type = mpi_datatype(t.scalar_type());
    MPI_Op mop = mpi_op(op, t.scalar_type());
    char* p = static_cast<char*>(t.data_ptr());
    const int64_t count = t.numel(), max = opts_.max_elements_per_call;
    const size_t esize = element_size(t);
    MPI_Comm comm = comm_;
    const int n = size_;
    at::Tensor tt = t;
    return enqueue(signature(CollectiveKind::kAllReduce, t, count, op, -1, tag), {t}, [=]() mutable {
      for_chunks(count, max, [&](int64_t off, int len) {
        MPI_Request req;
        ZS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p + off * esize, len, type, mop, comm, &req));
        ZS_MPI_CHECK(wait_request(&req));
      });
      if (op == ReduceOp::kAvg) tt.div_(n);
    });
  }

  std::shared_ptr<Work> run_broadcast(const at::Tensor& t, int root, std::string_view tag) override {
    MPI_Datatype type = mpi_datatype(t.scalar_type());
    char* p = static_cast<char*>(t.data_ptr());
    const int64_t count = t.numel(), max = opts_.max_elements_per_call;
    const size_t esize = element_size(t);
    MPI_Comm comm = comm_;
    return enqueue(signature(CollectiveKind::kBroadcast, t, count, ReduceOp::kSum, root, tag), {t}, [=] {
      for_chunks(count, max, [&](int64_t off, int len) {
        MPI_Request req;
        ZS_MPI_CHECK(MPI_Ibcast(p + off * esize, len, type, root, comm, &req));
        ZS_MPI_CHECK(wait_request(&req));
      });
    });
  }

  std::shared_ptr<Work> run_barrier(std::string_view tag) override {
    MPI_Comm comm = comm_;
    CollectiveSignature sig = signature(CollectiveKind::kBarrier, at::Tensor(), 0, ReduceOp::kSum, -1, tag);
    return enqueue(std::move(sig), {}, [comm] {
      MPI_Request req;
      ZS_MPI_CHECK(MPI_Ibarrier(comm, &req));
      ZS_MPI_CHECK(wait_request(&req));
    });
  }

 public:
  std::shared_ptr<Communicator> split(int color, int key) override {
    // MPI_Comm_split is collective over comm_, so it runs on the progress thread in call order.
    auto result = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    MPI_Comm comm = comm_;
    std::string tag = detail::concat("split(color=", color, ", key=", key, ")");
    CollectiveSignature sig = signature(CollectiveKind::kBarrier, at::Tensor(), 0, ReduceOp::kSum, -1, "zs.split");
    enqueue(std::move(sig), {}, [=] {
      ZS_MPI_CHECK(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, result.get()));
    })->wait();
    if (color < 0) return nullptr;
    CommOptions child = opts_;
    child.name = detail::concat(opts_.name, "/split(", color, ")");
    child.node_size = 0;  // consecutive ranks of this communicator, not of the child
    return make_mpi_communicator(*result, child);
  }

 private:
  std::string where() const { return detail::concat("communicator '", opts_.name, "' (mpi): "); }

  CollectiveSignature signature(CollectiveKind kind, const at::Tensor& t, int64_t count, ReduceOp op,
                                int root, std::string_view tag) {
    CollectiveSignature s;
    s.seq = ++seq_;
    s.kind = kind;
    s.dtype = t.defined() ? t.scalar_type() : c10::ScalarType::Byte;
    s.count = count;
    s.op = op;
    s.root = root;
    s.tag = std::string(tag);
    s.comm = opts_.name;
    return s;
  }

  std::shared_ptr<Work> enqueue(CollectiveSignature sig, std::vector<at::Tensor> keep, Body body) {
    auto work = std::make_shared<MpiWork>(std::move(sig), std::move(keep), opts_.timeout, opts_.poll_before_sleep,
                                          std::move(body), queue_);
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      if (!queue_->broken.empty()) {
        ZS_THROW(CommError, where(), work->signature().to_string(), " cannot run: ", queue_->broken);
      }
      queue_->pending.push_back(work);
      queue_->queued = queue_->pending.size();
    }
    Watchdog::instance().track(work, opts_.abort_on_timeout);
    queue_->cv.notify_one();
    return work;
  }

  static void for_chunks(int64_t count, int64_t max, const std::function<void(int64_t, int)>& fn) {
    if (count == 0) return;
    for (int64_t off = 0; off < count; off += max) fn(off, static_cast<int>(std::min(max, count - off)));
  }

  // out[r*S + i] = shard_r[i]. Chunks over the shard use a receive type whose extent is the whole
  // shard, so each rank's piece lands at its own offset without a staging copy. `in` == nullptr
  // means in place (this rank's shard already sits in its slice of `out`).
  static void all_gather_chunked(MPI_Comm comm, char* out, const char* in, int64_t shard, size_t esize,
                                 MPI_Datatype type, int64_t max) {
    if (shard <= max) {
      MPI_Request req;
      ZS_MPI_CHECK(MPI_Iallgather(in ? in : MPI_IN_PLACE, static_cast<int>(shard), type, out,
                                  static_cast<int>(shard), type, comm, &req));
      ZS_MPI_CHECK(wait_request(&req));
      return;
    }
    for_chunks(shard, max, [&](int64_t off, int len) {
      MPI_Datatype piece, strided;
      ZS_MPI_CHECK(MPI_Type_contiguous(len, type, &piece));
      ZS_MPI_CHECK(MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(shard * esize), &strided));
      ZS_MPI_CHECK(MPI_Type_commit(&strided));
      MPI_Request req;
      int rc = MPI_Iallgather(in ? in + off * esize : MPI_IN_PLACE, in ? len : 0, type,
                              out + off * esize, 1, strided, comm, &req);
      if (rc == MPI_SUCCESS) rc = wait_request(&req);
      MPI_Type_free(&strided);
      MPI_Type_free(&piece);
      ZS_MPI_CHECK(rc);
    });
  }

  // Sends part(r) (`pieces` x `shard` elements) to rank r of `comm` (`n` ranks) int8-encoded, each
  // piece on its own so that blocks of `block` start at every shard, in one all-to-all; returns
  // the fp32 sum, in rank order, of the parts that the ranks sent this one, decoded.
  static at::Tensor all_to_all_int8_sum(MPI_Comm comm, int n, const std::function<at::Tensor(int)>& part,
                                        int64_t pieces, int64_t shard, int64_t block, int64_t max) {
    const int64_t ep = quant::int8_encoded_bytes(shard, block), e = pieces * ep;
    const at::Tensor send = at::empty({n * e}, at::kByte), recv = at::empty({n * e}, at::kByte);
    for (int r = 0; r < n; ++r) {
      const at::Tensor values = part(r).contiguous();
      for (int64_t k = 0; k < pieces; ++k) {
        quant::encode_int8_into(values.narrow(0, k * shard, shard), block, send.narrow(0, r * e + k * ep, ep));
      }
    }
    const char* send_p = static_cast<const char*>(send.data_ptr());
    char* recv_p = static_cast<char*>(recv.data_ptr());
    // Parts longer than `max` bytes go in pieces: a type whose extent is one part, so piece k of
    // every part travels in one call.
    for_chunks(e, max, [&](int64_t off, int len) {
      Types types;
      MPI_Datatype piece = MPI_DATATYPE_NULL, spaced = MPI_DATATYPE_NULL;
      ZS_MPI_CHECK(MPI_Type_contiguous(len, MPI_BYTE, &piece));
      types.add(piece);
      ZS_MPI_CHECK(MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(e), &spaced));
      ZS_MPI_CHECK(MPI_Type_commit(&spaced));
      types.add(spaced);
      MPI_Request req;
      ZS_MPI_CHECK(MPI_Ialltoall(send_p + off, 1, spaced, recv_p + off, 1, spaced, comm, &req));
      ZS_MPI_CHECK(wait_request(&req));
    });
    at::Tensor sum = at::empty({pieces * shard}, at::kFloat);
    for (int r = 0; r < n; ++r) {
      for (int64_t k = 0; k < pieces; ++k) {
        const at::Tensor encoded = recv.narrow(0, r * e + k * ep, ep), into = sum.narrow(0, k * shard, shard);
        if (r == 0) {
          quant::decode_int8(encoded, block, into);
        } else {
          quant::decode_int8_add(encoded, block, into);
        }
      }
    }
    return sum;
  }

  // The communicators of a two-stage collective: `cross` joins the ranks of local rank `local`
  // on the `nodes` nodes (ordered by node), `node` the `local_size` ranks of this rank's node.
  struct Stages {
    MPI_Comm cross = MPI_COMM_NULL, node = MPI_COMM_NULL;
    int local = 0, local_size = 1, nodes = 1;
  };

  // Derived datatypes freed however the scope ends.
  struct Types {
    std::vector<MPI_Datatype> all;
    void add(MPI_Datatype t) { all.push_back(t); }
    ~Types() {
      for (MPI_Datatype& t : all) MPI_Type_free(&t);
    }
  };

  // The same result as all_gather_chunked, for ranks laid out node by node (rank = node x L +
  // local): stage 1 gathers the shards of the ranks of equal local rank across the nodes straight
  // into their slots of `out` (a receive type whose extent is L shards), stage 2 gathers those
  // columns inside the node in place (a vector of one piece per node, with an extent of one shard,
  // so that local rank j's column starts at slot j).
  static void all_gather_in_stages(const Stages& st, char* out, const char* in, int64_t shard, size_t esize,
                                   MPI_Datatype type, int64_t max) {
    const auto row_bytes = static_cast<MPI_Aint>(st.local_size * shard * esize);
    for_chunks(shard, max, [&](int64_t off, int len) {
      Types types;
      MPI_Datatype piece = MPI_DATATYPE_NULL, spaced = MPI_DATATYPE_NULL;
      ZS_MPI_CHECK(MPI_Type_contiguous(len, type, &piece));
      types.add(piece);
      ZS_MPI_CHECK(MPI_Type_create_resized(piece, 0, row_bytes, &spaced));
      ZS_MPI_CHECK(MPI_Type_commit(&spaced));
      types.add(spaced);
      MPI_Request req;
      char* mine = out + (st.local * shard + off) * esize;
      ZS_MPI_CHECK(MPI_Iallgather(in ? in + off * esize : MPI_IN_PLACE, in ? len : 0, type, mine, 1, spaced,
                                  st.cross, &req));
      ZS_MPI_CHECK(wait_request(&req));
      MPI_Datatype column = MPI_DATATYPE_NULL, columns = MPI_DATATYPE_NULL;
      ZS_MPI_CHECK(MPI_Type_create_hvector(st.nodes, len, row_bytes, type, &column));
      types.add(column);
      ZS_MPI_CHECK(MPI_Type_create_resized(column, 0, static_cast<MPI_Aint>(shard * esize), &columns));
      ZS_MPI_CHECK(MPI_Type_commit(&columns));
      types.add(columns);
      ZS_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, type, out + off * esize, 1, columns, st.node, &req));
      ZS_MPI_CHECK(wait_request(&req));
    });
  }

  // The node layout for the two-stage collectives, collectively: kept only when there are several
  // nodes of several ranks each, every node holding the same number of consecutive ranks.
  void find_nodes() {
    if (size_ < 4) return;
    MPI_Comm node = MPI_COMM_NULL;
    if (opts_.node_size > 0) {
      ZS_MPI_CHECK(MPI_Comm_split(comm_, rank_ / opts_.node_size, rank_, &node));
    } else {
      ZS_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    }
    int local = 0, l = 1;
    ZS_MPI_CHECK(MPI_Comm_rank(node, &local));
    ZS_MPI_CHECK(MPI_Comm_size(node, &l));
    std::vector<int> mates(l);
    ZS_MPI_CHECK(MPI_Allgather(&rank_, 1, MPI_INT, mates.data(), 1, MPI_INT, node));
    bool consecutive = (rank_ - local) % l == 0;
    for (int i = 0; i < l; ++i) consecutive = consecutive && mates[i] == rank_ - local + i;
    int mine[3] = {consecutive ? 1 : 0, l, -l}, all[3] = {0, 0, 0};
    ZS_MPI_CHECK(MPI_Allreduce(&mine[0], &all[0], 1, MPI_INT, MPI_MIN, comm_));
    ZS_MPI_CHECK(MPI_Allreduce(&mine[1], &all[1], 2, MPI_INT, MPI_MAX, comm_));
    const bool regular = all[0] == 1 && all[1] == -all[2];
    if (!regular || l < 2 || l == size_) {
      MPI_Comm_free(&node);
      return;
    }
    MPI_Comm cross = MPI_COMM_NULL;
    ZS_MPI_CHECK(MPI_Comm_split(comm_, local, rank_, &cross));
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(cross, MPI_ERRORS_RETURN);
    node_ = node;
    cross_ = cross;
    local_rank_ = local;
    local_size_ = l;
  }

  // out = op_r in[r*S : (r+1)*S]. Chunks pack the chunk of every rank's block into a staging buffer.
  static void reduce_scatter_chunked(MPI_Comm comm, at::Tensor& out, at::Tensor& in, int64_t shard, int n,
                                     MPI_Datatype type, MPI_Op op, int64_t max) {
    char* out_p = static_cast<char*>(out.data_ptr());
    char* in_p = static_cast<char*>(in.data_ptr());
    const size_t esize = out.element_size();
    if (shard <= max) {
      MPI_Request req;
      ZS_MPI_CHECK(MPI_Ireduce_scatter_block(in_p, out_p, static_cast<int>(shard), type, op, comm, &req));
      ZS_MPI_CHECK(wait_request(&req));
      return;
    }
    at::Tensor staging = at::empty({n * max}, in.options());
    char* st = static_cast<char*>(staging.data_ptr());
    for_chunks(shard, max, [&](int64_t off, int len) {
      for (int r = 0; r < n; ++r) {
        std::memcpy(st + static_cast<size_t>(r) * len * esize, in_p + (r * shard + off) * esize, len * esize);
      }
      MPI_Request req;
      ZS_MPI_CHECK(MPI_Ireduce_scatter_block(st, out_p + off * esize, len, type, op, comm, &req));
      ZS_MPI_CHECK(wait_request(&req));
    });
  }

  // Debug mode: all ranks compare the signature of the collective about to run.
  static void exchange_signature(MPI_Comm comm, const CollectiveSignature& sig) {
    int n = 0;
    ZS_MPI_CHECK(MPI_Comm_size(comm, &n));
    WireSignature mine = to_wire(sig);
    std::vector<WireSignature> all(n);
    MPI_Request req;
    ZS_MPI_CHECK(MPI_Iallgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm, &req));
    ZS_MPI_CHECK(wait_request(&req));
    std::string msg = describe_divergence(all, sig.comm);
    if (!msg.empty()) ZS_THROW(CommError, msg);
  }

  static void progress_loop(std::shared_ptr<Queue> q, MPI_Comm comm, bool check, std::chrono::microseconds poll) {
    t_busy_poll = poll;
    for (;;) {
      std::shared_ptr<MpiWork> work;
      // Collectives tend to come in bursts (one per unit): poll briefly before sleeping, so the
      // next one starts without a futex wake-up.
      const auto spin_until = std::chrono::steady_clock::now() + poll;
      while (q->queued.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lock(q->mu);
        q->cv.wait(lock, [&] { return q->stop || !q->pending.empty(); });
        if (q->pending.empty()) return;  // stop requested and nothing left
        work = q->pending.front();
        q->pending.pop_front();
        q->queued = q->pending.size();
      }
      work->mark_started();
      try {
        if (check) exchange_signature(comm, work->signature());
        work->run();
        work->complete();
      } catch (const CommError& e) {
        // A signature divergence is detected identically on every rank before anything ran, so the
        // communicator stays usable; any other MPI failure leaves it in an unknown state.
        bool divergence = std::string(e.message()).rfind("collective signatures diverge", 0) == 0;
        work->fail(std::current_exception());
        if (!divergence) q->break_with(detail::concat("the communicator is broken: ", e.message()));
      } catch (...) {
        work->fail(std::current_exception());
        q->break_with(detail::concat("the communicator is broken after a failure in ", work->signature().to_string()));
      }
    }
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  CommOptions opts_;
  // Set by find_nodes() for two-stage collectives; MPI_COMM_NULL otherwise.
  MPI_Comm node_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  int local_rank_ = 0, local_size_ = 1;
  uint64_t seq_ = 0;
  std::shared_ptr<Queue> queue_;
  std::thread worker_;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const CommOptions& options) {
  return std::make_shared<MpiCommunicator>(comm, options);
}

}  // namespace zeroshard::comm
