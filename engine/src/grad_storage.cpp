// SPDX-License-Identifier: Apache-2.0
#include "grad_storage.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/norm.h>
#include <c10/core/GradMode.h>

#include <utility>
#include <vector>

#include "zeroshard/store/shard_store.h"

namespace zeroshard::detail {

namespace {

// g times s: in place, or into a new tensor (for values another owner keeps).
void apply(at::Tensor& g, const GradScale& s, bool in_place) {
  c10::AutoGradMode no_grad(false);
  if (s.tensor.defined()) {
    if (in_place) {
      g.mul_(s.tensor.to(g.options()));
    } else {
      g = g.mul(s.tensor.to(g.options()));
    }
  } else if (in_place) {
    g.mul_(s.value);
  } else {
    g = g.mul(s.value);
  }
}

class ResidentGrad final : public GradStorage {
 public:
  ResidentGrad(int64_t shard_numel, MemoryStats* mem) : bytes_(shard_numel * 4), mem_(mem) {}
  ~ResidentGrad() override { drop(); }
  at::Tensor& shard() override { return grad_; }
  const at::Tensor& for_read() override { return grad_; }
  void add(at::Tensor reduced) override {
    if (grad_.defined()) {
      c10::AutoGradMode no_grad(false);
      grad_.add_(reduced);
      return;
    }
    grad_ = std::move(reduced);
    mem_->add(MemCategory::kGradShards, bytes_);
  }
  void scale(GradScale s) override {
    if (grad_.defined()) apply(grad_, s, /*in_place=*/true);
  }
  void drop() override {
    if (!grad_.defined()) return;
    mem_->sub(MemCategory::kGradShards, bytes_);
    grad_ = at::Tensor();
  }

 private:
  int64_t bytes_;
  MemoryStats* mem_;
  at::Tensor grad_;
};

class StoredGrad final : public GradStorage {
 public:
  StoredGrad(int64_t shard_numel, MemoryStats* mem, ShardStore* store, const std::string& unit, c10::Device device)
      : numel_(shard_numel), mem_(mem), store_(store), device_(device) {
    slot_ = store_->add(unit, numel_);
  }
  ~StoredGrad() override {
    if (resident()) mem_->sub(MemCategory::kGradShards, numel_ * 4);
  }

  at::Tensor& shard() override { return grad_; }

  const at::Tensor& for_read() override {
    if (resident() || !grad_.defined()) return grad_;
    at::Tensor g = store_->load(slot_, device_);
    // In place on a tensor of its own (read from a file, or copied to the device); out of place
    // where the store hands out its own host tensor (CPU store, CPU run): the stored values stay what
    // they are, the factors stay recorded for them. Either way the same kernel: the same values.
    const bool own = store_->target() != OffloadTarget::kCpu || !device_.is_cpu();
    for (const GradScale& s : scales_) apply(g, s, /*in_place=*/own);
    grad_ = std::move(g);
    dirty_ = false;
    mem_->add(MemCategory::kGradShards, numel_ * 4);
    return grad_;
  }

  void prefetch() override {
    if (grad_.defined() && !resident()) store_->prefetch(slot_, device_);
  }

  void add(at::Tensor reduced) override {
    if (grad_.defined()) {
      for_read();  // brought back to add to
      c10::AutoGradMode no_grad(false);
      grad_.add_(reduced);
    } else {
      grad_ = std::move(reduced);
      mem_->add(MemCategory::kGradShards, numel_ * 4);
    }
    dirty_ = true;
    squared_norm_ = at::Tensor();
  }

  void release(bool write_behind) override {
    if (!resident()) return;
    if (dirty_ || !stored_) {
      // What clipping would compute after reading the values back, taken while they are here.
      {
        c10::AutoGradMode no_grad(false);
        squared_norm_ = grad_.norm().to(at::kDouble).square();
      }
      if (write_behind) {
        store_->save_async(slot_, grad_);
      } else {
        store_->save(slot_, grad_);  // throws with the gradient still resident and changed
      }
      stored_ = true;
      dirty_ = false;
      scales_.clear();
      placeholder_ = at::empty({numel_}, at::TensorOptions().dtype(at::kFloat).device(c10::kMeta));
    }
    grad_ = placeholder_;
    mem_->sub(MemCategory::kGradShards, numel_ * 4);
  }

  void scale(GradScale s) override {
    if (!grad_.defined()) return;
    if (resident()) {
      apply(grad_, s, /*in_place=*/true);
      dirty_ = true;
      squared_norm_ = at::Tensor();
    } else {
      scales_.push_back(std::move(s));
    }
  }

  void drop() override {
    if (!grad_.defined()) return;
    if (resident()) mem_->sub(MemCategory::kGradShards, numel_ * 4);
    grad_ = at::Tensor();
    store_->discard(slot_);
    stored_ = false;
    dirty_ = false;
    scales_.clear();
    placeholder_ = at::Tensor();
    squared_norm_ = at::Tensor();
  }

  const at::Tensor* known_squared_norm() const override {
    if (!grad_.defined() || resident() || !scales_.empty() || !squared_norm_.defined()) return nullptr;
    return &squared_norm_;
  }

  bool stored() const override { return true; }
  std::string file() const override { return store_->file(slot_); }

 private:
  bool resident() const { return grad_.defined() && !grad_.is_meta(); }

  int64_t numel_;
  MemoryStats* mem_;
  ShardStore* store_;
  c10::Device device_;
  int slot_ = -1;
  at::Tensor grad_;
  bool stored_ = false;  // the store holds the gradient (times scales_)
  bool dirty_ = false;   // the resident gradient is not what the store holds times scales_
  std::vector<GradScale> scales_;
  at::Tensor placeholder_;  // what shard() holds while the gradient is stored only
  at::Tensor squared_norm_;  // of the values last written (see known_squared_norm)
};

}  // namespace

std::unique_ptr<GradStorage> resident_grad(int64_t shard_numel, MemoryStats* mem) {
  return std::make_unique<ResidentGrad>(shard_numel, mem);
}

std::unique_ptr<GradStorage> stored_grad(int64_t shard_numel, MemoryStats* mem, ShardStore* store,
                                         const std::string& unit, c10::Device device) {
  return std::make_unique<StoredGrad>(shard_numel, mem, store, unit, device);
}

}  // namespace zeroshard::detail
