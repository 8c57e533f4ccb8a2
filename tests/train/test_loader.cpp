// SPDX-License-Identifier: Apache-2.0
// DataLoader: batch order independent of the worker count, bounded prefetch, worker exceptions
// re-thrown on the calling thread with the batch and sample.

#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/test_util.h"
#include "zeroshard/train/loader.h"
#include "zeroshard/train/sampler.h"

namespace zs = zeroshard;

namespace {

// Example i: data = [i, i, i] (float), target = i (int64). Optionally slow on some indices, so
// workers finish out of order, and failing at one index.
class CountingDataset : public zs::Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t fail_at = -1, bool uneven_work = false)
      : n_(n), fail_at_(fail_at), uneven_(uneven_work) {}
  int64_t size() const override { return n_; }
  zs::Example get(int64_t i) const override {
    ++calls;
    if (i == fail_at_) throw std::runtime_error("sample " + std::to_string(i) + " is corrupt");
    if (uneven_) std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 5 * 200));
    return {at::full({3}, static_cast<float>(i)), at::scalar_tensor(i, at::kLong)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
  bool uneven_;
};

std::vector<zs::Batch> drain(zs::DataLoader& loader) {
  std::vector<zs::Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

TEST(DataLoader, BatchesFollowTheOrderWhateverTheWorkerCount) {
  auto ds = std::make_shared<CountingDataset>(103, -1, /*uneven_work=*/true);
  zs::DistributedSampler sampler(ds->size(), 1, 0, {true, 5, false});
  sampler.set_epoch(3);
  const std::vector<int64_t> order = sampler.indices();
  std::vector<std::vector<zs::Batch>> runs;
  for (int workers : {0, 1, 4}) {
    zs::DataLoaderOptions o;
    o.batch_size = 8;
    o.num_workers = workers;
    o.prefetch_batches = 3;
    zs::DataLoader loader(ds, o);
    loader.start(order);
    EXPECT_EQ(loader.num_batches(), 13);
    runs.push_back(drain(loader));
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), 13u);
    for (size_t k = 0; k < runs[r].size(); ++k) {
      const zs::Batch& b = runs[r][k];
      EXPECT_EQ(b.index, static_cast<int64_t>(k));
      const int64_t expect_n = k == 12 ? 103 - 12 * 8 : 8;  // the last batch is partial
      ASSERT_EQ(b.size(), expect_n);
      EXPECT_EQ(b.data.sizes(), (std::vector<int64_t>{expect_n, 3}));
      for (int64_t j = 0; j < expect_n; ++j) {
        const int64_t want = order[k * 8 + j];
        EXPECT_EQ(b.sample_indices[j], want);
        EXPECT_EQ(b.target[j].item<int64_t>(), want);
        EXPECT_EQ(b.data[j][0].item<float>(), static_cast<float>(want));
      }
      EXPECT_TRUE(at::equal(b.data, runs[0][k].data)) << "run " << r << " batch " << k;
    }
  }
}

TEST(DataLoader, DropLastAndNewEpochs) {
  auto ds = std::make_shared<CountingDataset>(20);
  zs::DataLoaderOptions o;
  o.batch_size = 6;
  o.drop_last = true;
  zs::DataLoader loader(ds, o);
  std::vector<int64_t> order(20);
  for (int i = 0; i < 20; ++i) order[i] = 19 - i;
  loader.start(order);
  auto batches = drain(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].sample_indices.front(), 19);
  EXPECT_FALSE(loader.next().has_value()) << "stays at the end";
  // A new epoch restarts (here mid-way through: start() ends the running one).
  loader.start({1, 2, 3, 4, 5, 6, 7});
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->sample_indices, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  loader.start({0});
  EXPECT_FALSE(loader.next().has_value()) << "one sample is less than a batch with drop_last";
  EXPECT_EQ(zs::DataLoader::batches_for(13, 4, false), 4);
  EXPECT_EQ(zs::DataLoader::batches_for(13, 4, true), 3);
}

TEST(DataLoader, PrefetchIsBounded) {
  auto ds = std::make_shared<CountingDataset>(400);
  zs::DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 4;
  o.prefetch_batches = 2;
  zs::DataLoader loader(ds, o);
  std::vector<int64_t> order(400);
  for (int i = 0; i < 400; ++i) order[i] = i;
  loader.start(order);
  // Wait until the workers stop on their own: the bound, not our timing, makes them stop.
  for (int i = 0; i < 2000 && ds->calls.load() < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds->calls.load(), 8) << "2 batches of 4 may be assembled ahead, no more";
  ASSERT_TRUE(loader.next().has_value());
  for (int i = 0; i < 2000 && ds->calls.load() < 12; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds->calls.load(), 12) << "taking one batch frees exactly one slot";
}

TEST(DataLoader, WorkerExceptionIsRethrownWithBatchAndSample) {
  for (int workers : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers");
    auto ds = std::make_shared<CountingDataset>(40, /*fail_at=*/13);
    zs::DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    zs::DataLoader loader(ds, o);
    std::vector<int64_t> order(40);
    for (int i = 0; i < 40; ++i) order[i] = i;
    loader.start(order);
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(loader.next().has_value()) << "batches before the failing one arrive";
    try {
      loader.next();
      FAIL() << "batch 3 holds the failing sample 13";
    } catch (const zs::DataError& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("assembling batch 3 of 10"), std::string::npos) << w;
      EXPECT_NE(w.find("dataset index 13"), std::string::npos) << w;
      EXPECT_NE(w.find("sample 13 is corrupt"), std::string::npos) << w;
    }
    EXPECT_FALSE(loader.next().has_value()) << "the epoch ends at the error";
    loader.start({1, 2, 3});  // a fresh epoch without the bad sample works
    EXPECT_TRUE(loader.next().has_value());
  }
}

TEST(DataLoader, RejectsMisuse) {
  auto ds = std::make_shared<CountingDataset>(5);
  EXPECT_THROW(zs::DataLoader(nullptr, {}), zs::UsageError);
  zs::DataLoaderOptions bad;
  bad.batch_size = 0;
  EXPECT_THROW(zs::DataLoader(ds, bad), zs::UsageError);
  bad.batch_size = 1;
  bad.prefetch_batches = 0;
  EXPECT_THROW(zs::DataLoader(ds, bad), zs::UsageError);
  zs::DataLoader loader(ds, {});
  EXPECT_THROW(loader.next(), zs::UsageError) << "next() before start()";
  EXPECT_THROW(loader.start({0, 5}), zs::UsageError) << "index beyond the dataset";
}

TEST(DataLoader, DestroyingMidEpochJoinsTheWorkers) {
  auto ds = std::make_shared<CountingDataset>(1000, -1, true);
  zs::DataLoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 4;
  {
    zs::DataLoader loader(ds, o);
    std::vector<int64_t> order(1000);
    for (int i = 0; i < 1000; ++i) order[i] = i;
    loader.start(order);
    ASSERT_TRUE(loader.next().has_value());
  }  // joins the workers: must return, not hang
  const int64_t after = ds->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(ds->calls.load(), after) << "no worker may still be reading the dataset";
  EXPECT_LT(after, 1000) << "the workers stopped at the prefetch bound, not at the end of the epoch";
}

}  // namespace
