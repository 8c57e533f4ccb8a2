// SPDX-License-Identifier: Apache-2.0
#include "shard_storage.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <functional>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/quantize.h"
#include "zeroshard/store/shard_store.h"

namespace zeroshard::detail {

namespace {

int64_t fp32_bytes(const ShardShape& s) { return s.shard_numel * 4; }

// An all-gather whose result is finished by `done` (run once, after the wait).
class ThenWork final : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> done) : inner_(std::move(inner)), done_(std::move(done)) {}
  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    if (done_) {
      std::function<void()> done = std::move(done_);
      done_ = nullptr;
      done();
    }
  }
  bool is_completed() override { return inner_->is_completed(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  const CollectiveSignature& signature() const override { return inner_->signature(); }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> done_;
};

class ResidentShard final : public ShardStorage {
 public:
  ResidentShard(const ShardShape& shape, at::Tensor values) : shape_(shape), shard_(std::move(values)) {
    shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
  }
  ~ResidentShard() override { shape_.mem->sub(MemCategory::kShardedParams, fp32_bytes(shape_)); }
  at::Tensor& values() override { return shard_; }
  const at::Tensor& for_read() override { return shard_; }
  at::Tensor& for_overwrite() override { return shard_; }
  void mark_modified() override {}
  void release(std::vector<at::Tensor>*) override {}
  bool resident() const override { return true; }
  int64_t bytes_between_uses() const override { return fp32_bytes(shape_); }
  std::shared_ptr<Work> gather(const GatherInto& g) override { return gather_fp32(g, shard_, shape_); }

 private:
  ShardShape shape_;
  at::Tensor shard_;
};

class StoredShard final : public ShardStorage {
 public:
  StoredShard(const ShardShape& shape, at::Tensor values, ShardStore* store, bool keep_param_dtype_copy)
      : shape_(shape), store_(store), shard_(std::move(values)), dirty_(true) {
    ZS_CHECK(!keep_param_dtype_copy || shape_.param_dtype != c10::kFloat, "unit '", shape_.name,
             "': a param_dtype copy of the shard needs a param_dtype other than fp32");
    slot_ = store_->add(shape_.name, shape_.shard_numel);  // may throw (disk full): nothing counted yet
    shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
    if (keep_param_dtype_copy) {
      c10::AutoGradMode no_grad(false);
      copy_ = shard_.to(shape_.param_dtype);
      shape_.mem->add(MemCategory::kShardedParams, copy_bytes());
    }
  }
  ~StoredShard() override {
    if (shard_.defined()) shape_.mem->sub(MemCategory::kShardedParams, fp32_bytes(shape_));
    if (copy_.defined()) shape_.mem->sub(MemCategory::kShardedParams, copy_bytes());
  }

  at::Tensor& values() override {
    load();
    dirty_ = true;
    return shard_;
  }
  const at::Tensor& for_read() override {
    load();
    return shard_;
  }
  at::Tensor& for_overwrite() override {
    if (!shard_.defined()) {
      shard_ = store_->allocate(slot_, shape_.device);
      shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
    }
    dirty_ = true;
    return shard_;
  }
  void mark_modified() override { dirty_ = true; }

  void release(std::vector<at::Tensor>* retired) override { drop(retired, /*behind=*/false); }
  void release_behind() override { drop(nullptr, /*behind=*/true); }

  void prefetch() override {
    if (!shard_.defined()) store_->prefetch(slot_, shape_.device);
  }
  bool resident() const override { return shard_.defined(); }
  int64_t bytes_between_uses() const override { return fp32_bytes(shape_); }

  // A param_dtype copy is gathered as it is (bitwise the cast shard) and the store is not read; a
  // shard resident itself (handed out by values(), perhaps changed) is gathered from its values.
  std::shared_ptr<Work> gather(const GatherInto& g) override {
    if (!copy_.defined() || shard_.defined()) return gather_fp32(g, for_read(), shape_);
    refresh_copy();
    if (g.group->size() == 1) {
      c10::AutoGradMode no_grad(false);
      g.full.copy_(copy_);
      return nullptr;
    }
    *g.elements += g.full.numel();
    if (g.quant_block > 0) return gather_quantized(g, copy_, shape_);
    if (g.bytes != nullptr) *g.bytes += g.full.numel() * static_cast<int64_t>(g.full.element_size());
    return g.group->all_gather_into(g.full, copy_, g.tag);
  }

  void load_for_gather() override {
    if (!copy_.defined() || shard_.defined()) {
      load();
    } else {
      refresh_copy();
    }
  }

  bool stored() const override { return true; }
  void abandon() noexcept override {
    if (copy_.defined()) copy_stale_ = true;  // it may have followed values now dropped
    if (!shard_.defined()) return;
    shard_ = at::Tensor();
    dirty_ = false;
    shape_.mem->sub(MemCategory::kShardedParams, fp32_bytes(shape_));
  }
  bool has_param_dtype_copy() const override { return copy_.defined(); }
  std::string file() const override { return store_->file(slot_); }
  void rename(const std::string& name) override {
    shape_.name = name;
    store_->rename(slot_, name);
  }

 private:
  // release() and release_behind(): the write at once or behind.
  void drop(std::vector<at::Tensor>* retired, bool behind) {
    if (!shard_.defined()) return;
    if (dirty_) {
      if (copy_.defined()) {
        // The resident copy follows the master first: should the write fail, the shard stays
        // resident and modified (what gathers read meanwhile), and the copy already holds its values.
        c10::AutoGradMode no_grad(false);
        copy_.copy_(shard_);
      }
      if (behind) {
        store_->save_async(slot_, shard_);  // the store holds the values until the write lands
      } else {
        store_->save(slot_, shard_);  // throws with the shard still resident and modified
      }
      dirty_ = false;
    }
    if (retired != nullptr) retired->push_back(std::move(shard_));
    shard_ = at::Tensor();
    shape_.mem->sub(MemCategory::kShardedParams, fp32_bytes(shape_));
  }

  void load() {
    if (shard_.defined()) return;
    shard_ = store_->load(slot_, shape_.device);
    dirty_ = false;
    shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
  }
  // A step was abandoned after the copy followed its new values: cast the stored ones again.
  void refresh_copy() {
    if (!copy_stale_) return;
    c10::AutoGradMode no_grad(false);
    copy_.copy_(for_read());
    copy_stale_ = false;
    release(nullptr);  // unchanged: nothing written
  }
  int64_t copy_bytes() const {
    return shape_.shard_numel * static_cast<int64_t>(c10::elementSize(shape_.param_dtype));
  }

  ShardShape shape_;
  ShardStore* store_;
  int slot_ = -1;
  at::Tensor shard_;  // resident fp32 values, or undefined
  bool dirty_;        // handed out by values() since it was loaded: release() writes it back
  at::Tensor copy_;   // [S] in param_dtype, or undefined
  bool copy_stale_ = false;  // copy_ no longer the cast of the stored values (an abandoned step)
};

class EncodedShard final : public ShardStorage {
 public:
  EncodedShard(const ShardShape& shape, at::Tensor values, std::shared_ptr<const ShardCodec> codec)
      : shape_(shape), codec_(std::move(codec)), shard_(std::move(values)), dirty_(true) {
    shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
  }
  ~EncodedShard() override {
    if (shard_.defined()) shape_.mem->sub(MemCategory::kShardedParams, fp32_bytes(shape_));
    if (packed_.defined()) shape_.mem->sub(MemCategory::kShardedParams, bytes_between_uses());
    gather_freed();
  }

  at::Tensor& values() override {
    decode();
    dirty_ = true;
    return shard_;
  }
  const at::Tensor& for_read() override {
    decode();
    return shard_;
  }
  at::Tensor& for_overwrite() override {
    if (!shard_.defined()) {
      shard_ = at::zeros({shape_.shard_numel}, packed_.options().dtype(at::kFloat));  // the gaps stay 0
      shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
    }
    dirty_ = true;
    return shard_;
  }
  void mark_modified() override { dirty_ = true; }

  // Encodes values handed out by values() or for_overwrite() (UsageError naming the unit for a
  // value the codec cannot store: the shard stays resident and modified), then drops them.
  void release(std::vector<at::Tensor>*) override {
    if (!shard_.defined()) return;
    if (dirty_) {
      at::Tensor packed = codec_->encode(shard_, "unit '" + shape_.name + "'");
      if (!packed_.defined()) shape_.mem->add(MemCategory::kShardedParams, bytes_between_uses());
      packed_ = std::move(packed);
      dirty_ = false;
    }
    shard_ = at::Tensor();
    shape_.mem->sub(MemCategory::kShardedParams, fp32_bytes(shape_));
  }

  bool resident() const override { return shard_.defined(); }
  int64_t bytes_between_uses() const override { return codec_->encoded_bytes(shape_.shard_numel); }

  // The encoded shards are what travels; each rank's part is decoded into the full buffer once the
  // gather is waited for (on a GPU, on the stream that waited).
  std::shared_ptr<Work> gather(const GatherInto& g) override {
    if (shard_.defined()) release(nullptr);  // values handed out and changed: encoded first
    c10::AutoGradMode no_grad(false);
    if (g.group->size() == 1) {
      codec_->decode(packed_, g.full);
      return nullptr;
    }
    *g.elements += g.full.numel();
    const int n = g.group->size();
    gathered_ = at::empty({packed_.numel() * n}, packed_.options());
    if (g.bytes != nullptr) *g.bytes += gathered_.numel();
    shape_.mem->add(MemCategory::kCommBuffers, gathered_.numel());
    at::Tensor full = g.full;
    return std::make_shared<ThenWork>(g.group->all_gather_into(gathered_, packed_, g.tag), [this, full, n] {
      c10::AutoGradMode no_grad(false);
      const int64_t b = packed_.numel();
      for (int r = 0; r < n; ++r) {
        codec_->decode(gathered_.narrow(0, r * b, b), full.narrow(0, r * shape_.shard_numel, shape_.shard_numel));
      }
    });
  }
  // Kept until the full buffer is freed: on a GPU the decoding is queued on the stream that waited.
  void gather_freed() override {
    if (!gathered_.defined()) return;
    shape_.mem->sub(MemCategory::kCommBuffers, gathered_.numel());
    gathered_ = at::Tensor();
  }
  const ShardCodec* codec() const override { return codec_.get(); }
  void rename(const std::string& name) override { shape_.name = name; }

 private:
  void decode() {
    if (shard_.defined()) return;
    shard_ = at::empty({shape_.shard_numel}, packed_.options().dtype(at::kFloat));
    codec_->decode(packed_, shard_);
    dirty_ = false;
    shape_.mem->add(MemCategory::kShardedParams, fp32_bytes(shape_));
  }

  ShardShape shape_;
  std::shared_ptr<const ShardCodec> codec_;
  at::Tensor shard_;     // decoded fp32 values while handed out, or undefined
  bool dirty_;           // release() encodes them again
  at::Tensor packed_;    // this rank's encoded shard (uint8)
  at::Tensor gathered_;  // every rank's encoded shard, held while the full buffer is
};

}  // namespace

std::shared_ptr<Work> gather_fp32(const GatherInto& g, const at::Tensor& shard, const ShardShape& shape) {
  c10::AutoGradMode no_grad(false);
  if (g.group->size() == 1) {
    // One rank, low precision: the "gather" is the cast itself, written straight into the full
    // buffer (bitwise what gathering the cast shard gives, without the copy or the collective).
    g.full.copy_(shard);
    return nullptr;
  }
  *g.elements += g.full.numel();
  if (g.quant_block > 0) return gather_quantized(g, shard, shape);
  if (g.bytes != nullptr) *g.bytes += g.full.numel() * static_cast<int64_t>(g.full.element_size());
  if (shape.param_dtype == c10::kFloat) return g.group->all_gather_into(g.full, shard, g.tag);
  // Low-precision compute: the shard is cast straight into this rank's slice of the full buffer
  // and gathered in place, so no cast copy of the shard exists while the gather is in flight.
  at::Tensor mine = g.full.narrow(0, g.group->rank() * shape.shard_numel, shape.shard_numel);
  mine.copy_(shard);
  return g.group->all_gather_into(g.full, mine, g.tag);
}

std::unique_ptr<ShardStorage> resident_shard(const ShardShape& shape, at::Tensor values) {
  return std::make_unique<ResidentShard>(shape, std::move(values));
}

std::unique_ptr<ShardStorage> stored_shard(const ShardShape& shape, at::Tensor values, ShardStore* store,
                                           bool keep_param_dtype_copy) {
  return std::make_unique<StoredShard>(shape, std::move(values), store, keep_param_dtype_copy);
}

StoreOptions param_store_options(StoreOptions options, c10::Device device) {
  if (!device.is_cpu()) options.generations = 1;
  return options;
}

std::unique_ptr<ShardStorage> encoded_shard(const ShardShape& shape, at::Tensor values,
                                            std::shared_ptr<const ShardCodec> codec) {
  return std::make_unique<EncodedShard>(shape, std::move(values), std::move(codec));
}

std::shared_ptr<Work> gather_quantized(const GatherInto& g, const at::Tensor& values, const ShardShape& shape) {
  ZS_REQUIRE(g.keep != nullptr, UsageError, "a quantized gather of '", shape.name, "' needs somewhere to keep its buffers");
  c10::AutoGradMode no_grad(false);
  const int n = g.group->size();
  const int64_t block = g.quant_block, numel = shape.shard_numel;
  // Encoded straight into this rank's part of the gather's buffer and gathered in place (no
  // separate encoded copy of the shard).
  const int64_t part = quant::int8_encoded_bytes(numel, block);
  at::Tensor all = at::empty({part * n}, values.options().dtype(at::kByte));
  at::Tensor mine = all.narrow(0, g.group->rank() * part, part);
  quant::encode_int8_into(values.reshape({-1}), block, mine);
  shape.mem->add(MemCategory::kCommBuffers, all.numel());
  g.keep->push_back(all);
  if (g.bytes != nullptr) *g.bytes += all.numel();
  const at::Tensor full = g.full;
  return std::make_shared<ThenWork>(g.group->all_gather_into(all, mine, g.tag), [all, full, n, block, numel] {
    c10::AutoGradMode no_grad(false);
    const int64_t b = all.numel() / n;
    for (int r = 0; r < n; ++r) quant::decode_int8(all.narrow(0, r * b, b), block, full.narrow(0, r * numel, numel));
  });
}

}  // namespace zeroshard::detail
