// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/loader.h"

#include <ATen/ops/empty.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "zeroshard/core/host_memory.h"

namespace zeroshard {

// One epoch's state, shared by the training thread and the workers.
struct DataLoader::Epoch {
  std::vector<int64_t> order;
  int64_t num_batches = 0;

  struct Slot {
    Batch batch;
    std::exception_ptr error;
    int64_t failed_sample = -1;
  };

  std::mutex mu;
  std::condition_variable work_cv;   // workers: a batch may be claimed, or stop
  std::condition_variable ready_cv;  // next(): a slot became ready
  int64_t next_claim = 0;            // the next batch a worker may build
  int64_t next_deliver = 0;          // the batch next() returns next
  std::map<int64_t, Slot> ready;     // assembled (or failed) batches not yet delivered
  bool stopping = false;
  bool failed = false;               // an error was delivered: the epoch is over
  std::vector<std::thread> workers;
};

namespace {

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.what();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

int64_t DataLoader::batches_for(int64_t samples, int64_t batch_size, bool drop_last) {
  return drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  ZS_REQUIRE(dataset_ != nullptr, UsageError, "DataLoader: the dataset is null");
  ZS_REQUIRE(options_.batch_size >= 1, UsageError, "DataLoader: batch_size = ", options_.batch_size, " must be >= 1");
  ZS_REQUIRE(options_.num_workers >= 0, UsageError, "DataLoader: num_workers = ", options_.num_workers,
             " must be >= 0");
  ZS_REQUIRE(options_.prefetch_batches >= 1, UsageError, "DataLoader: prefetch_batches = ",
             options_.prefetch_batches, " must be >= 1");
}

DataLoader::~DataLoader() { stop(); }

int64_t DataLoader::num_batches() const { return epoch_ ? epoch_->num_batches : 0; }

void DataLoader::stop() {
  if (!epoch_) return;
  {
    std::lock_guard<std::mutex> lock(epoch_->mu);
    epoch_->stopping = true;
  }
  epoch_->work_cv.notify_all();
  for (auto& t : epoch_->workers) t.join();
  epoch_.reset();
}

namespace {

// Builds batch `k` of `order` into `slot`; records the failing sample on error.
void assemble(const Dataset& dataset, const DataLoaderOptions& opt, const std::vector<int64_t>& order, int64_t k,
              DataLoader::Epoch::Slot& slot) {
  const int64_t begin = k * opt.batch_size;
  const int64_t end = std::min<int64_t>(begin + opt.batch_size, static_cast<int64_t>(order.size()));
  std::vector<at::Tensor> data, target;
  data.reserve(static_cast<size_t>(end - begin));
  target.reserve(static_cast<size_t>(end - begin));
  slot.batch.index = k;
  try {
    for (int64_t p = begin; p < end; ++p) {
      slot.failed_sample = order[static_cast<size_t>(p)];
      Example ex = dataset.get(slot.failed_sample);
      ZS_REQUIRE(ex.data.defined() && ex.target.defined(), DataError, "dataset returned an undefined tensor for index ",
                 slot.failed_sample);
      data.push_back(std::move(ex.data));
      target.push_back(std::move(ex.target));
      slot.batch.sample_indices.push_back(slot.failed_sample);
    }
    slot.failed_sample = -1;
    const bool pin = opt.pin_memory && opt.device.is_cuda();
    // Example by example into one tensor: small copies run on this thread alone (at::stack would
    // start an OpenMP team per worker thread, whose spinning threads take cores from training).
    auto stack = [&](const std::vector<at::Tensor>& parts, const char* what) {
      const at::Tensor& first = parts.front();
      std::vector<int64_t> shape{static_cast<int64_t>(parts.size())};
      for (int64_t d : first.sizes()) shape.push_back(d);
      at::Tensor out = at::empty(shape, first.options().pinned_memory(pin));
      for (size_t j = 0; j < parts.size(); ++j) {
        ZS_REQUIRE(parts[j].sizes() == first.sizes() && parts[j].scalar_type() == first.scalar_type(), DataError,
                   "example ", what, " of dataset index ", slot.batch.sample_indices[j], " has shape ",
                   parts[j].sizes(), " and dtype ", parts[j].scalar_type(), " but dataset index ",
                   slot.batch.sample_indices[0], " has ", first.sizes(), " and ", first.scalar_type(),
                   ": a batch needs equal shapes");
        out.select(0, static_cast<int64_t>(j)).copy_(parts[j]);
      }
      return out;
    };
    slot.batch.data = stack(data, "data");
    slot.batch.target = stack(target, "target");
  } catch (...) {
    slot.error = std::current_exception();
  }
}

void worker_loop(const Dataset& dataset, const DataLoaderOptions& opt, DataLoader::Epoch& e) {
  static const int kPhase = memory_phase_id("data loader: batch assembly");
  set_memory_phase(kPhase);
  for (;;) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(e.mu);
      e.work_cv.wait(lock, [&] {
        return e.stopping || e.next_claim >= e.num_batches || e.next_claim < e.next_deliver + opt.prefetch_batches;
      });
      if (e.stopping || e.next_claim >= e.num_batches) return;
      k = e.next_claim++;
    }
    DataLoader::Epoch::Slot slot;
    assemble(dataset, opt, e.order, k, slot);
    {
      std::lock_guard<std::mutex> lock(e.mu);
      e.ready.emplace(k, std::move(slot));
    }
    e.ready_cv.notify_all();
  }
}

}  // namespace

void DataLoader::start(std::vector<int64_t> order) {
  stop();
  const int64_t n = dataset_->size();
  for (size_t p = 0; p < order.size(); ++p) {
    ZS_REQUIRE(order[p] >= 0 && order[p] < n, UsageError, "DataLoader::start: index ", order[p], " at position ", p,
               " is outside the dataset [0, ", n, ")");
  }
  epoch_ = std::make_unique<Epoch>();
  epoch_->num_batches = batches_for(static_cast<int64_t>(order.size()), options_.batch_size, options_.drop_last);
  epoch_->order = std::move(order);
  for (int w = 0; w < options_.num_workers; ++w) {
    epoch_->workers.emplace_back(worker_loop, std::cref(*dataset_), std::cref(options_), std::ref(*epoch_));
  }
}

c10::optional<Batch> DataLoader::next() {
  ZS_REQUIRE(epoch_ != nullptr, UsageError, "DataLoader::next() before start(): begin an epoch with start(order)");
  Epoch& e = *epoch_;
  if (e.failed || e.next_deliver >= e.num_batches) return c10::nullopt;
  const int64_t k = e.next_deliver;
  Epoch::Slot slot;
  if (options_.num_workers == 0) {
    assemble(*dataset_, options_, e.order, k, slot);
    ++e.next_deliver;
  } else {
    std::unique_lock<std::mutex> lock(e.mu);
    e.ready_cv.wait(lock, [&] { return e.ready.count(k) > 0; });
    auto it = e.ready.find(k);
    slot = std::move(it->second);
    e.ready.erase(it);
    ++e.next_deliver;
    lock.unlock();
    e.work_cv.notify_all();
  }
  if (slot.error) {
    e.failed = true;
    const int64_t begin = k * options_.batch_size;
    ZS_THROW(DataError, "assembling batch ", k, " of ", e.num_batches, " (order positions ", begin, "..",
             std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(e.order.size())) - 1, ")",
             slot.failed_sample >= 0 ? detail::concat(" failed at dataset index ", slot.failed_sample) : std::string(),
             ": ", what_of(slot.error));
  }
  return deliver(std::move(slot.batch));
}

Batch DataLoader::deliver(Batch batch) const {
  if (options_.device != batch.data.device()) {
    const at::TensorOptions to = at::TensorOptions().device(options_.device);
    batch.data = batch.data.to(to, /*non_blocking=*/true);
    batch.target = batch.target.to(to, /*non_blocking=*/true);
  }
  return batch;
}

}  // namespace zeroshard
