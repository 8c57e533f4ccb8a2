// SPDX-License-Identifier: Apache-2.0
#pragma once
// DataLoader: assembles batches of a Dataset on background threads, in a fixed order.
//
//   zeroshard::DataLoader loader(dataset, {/*batch_size=*/32});
//   sampler.set_epoch(epoch);
//   loader.start(sampler.indices());
//   while (auto batch = loader.next()) train(batch->data, batch->target);
//
// Contract:
// - Batch k of an epoch holds the examples order[k * batch_size, (k + 1) * batch_size) of the
//   order given to start(), stacked along a new first dimension (the last batch is smaller unless
//   drop_last). next() returns batches in k order whatever num_workers is: the data a step sees
//   does not depend on the thread count.
// - num_workers threads assemble batches ahead of the training thread; at most prefetch_batches
//   batches are claimed beyond the one next() waits for (assembled or in progress), which bounds
//   memory. num_workers = 0 assembles each batch inside next().
// - An exception thrown while assembling batch k (by Dataset::get) is re-thrown by the next() call
//   that would return batch k, as a DataError naming the batch, the sample index and the original
//   message; batches before k are delivered first. The epoch ends there (start() begins a new one).
// - Device: with a CUDA device, batches are assembled in pinned host memory (when pin_memory) and
//   next() copies them with non_blocking = true, so the copy is asynchronous for the host and
//   ordered on the current CUDA stream; the caching host allocator keeps a pinned block alive until
//   the copies reading it have finished. With a CPU device the assembled tensors are returned.
// Thread-safety: start()/next() from one thread (the training thread); the workers only call the
// dataset's const get().

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "zeroshard/train/dataset.h"

namespace zeroshard {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool drop_last = false;         // drop a final batch smaller than batch_size
  int num_workers = 2;            // assembling threads; 0 = on the calling thread
  int prefetch_batches = 4;       // batches assembled ahead of next(), >= 1
  c10::Device device = c10::kCPU; // where next() delivers batches
  bool pin_memory = true;         // CUDA device: assemble in pinned host memory
};

struct Batch {
  at::Tensor data;    // [n, ...] stacked Example::data
  at::Tensor target;  // [n, ...] stacked Example::target
  int64_t index = 0;  // batch number in the epoch, from 0
  std::vector<int64_t> sample_indices;  // dataset indices, in batch order
  int64_t size() const { return static_cast<int64_t>(sample_indices.size()); }
};

class DataLoader {
 public:
  // Throws UsageError for a null dataset, batch_size < 1, num_workers < 0, prefetch_batches < 1.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();  // stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins an epoch over `order` (dataset indices; UsageError for one outside [0, size())), ending
  // the previous epoch if it is still running.
  void start(std::vector<int64_t> order);
  // The next batch of the epoch, or nullopt after the last one. UsageError before start().
  c10::optional<Batch> next();

  // Batches in the current epoch.
  int64_t num_batches() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // Number of batches that would be built from `samples` indices.
  static int64_t batches_for(int64_t samples, int64_t batch_size, bool drop_last);

  struct Epoch;

 private:
  void stop();
  Batch deliver(Batch batch) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::unique_ptr<Epoch> epoch_;
};

}  // namespace zeroshard
