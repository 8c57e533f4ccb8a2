// SPDX-License-Identifier: Apache-2.0
#include "flat_param.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/quantize.h"
#include "zeroshard/store/shard_store.h"

namespace zeroshard {

FlatParam::FlatParam(std::string name, std::vector<ParamSlot> slots, bool trainable,
                     std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate,
                     MemoryStats* mem, c10::ScalarType param_dtype, c10::ScalarType reduce_dtype,
                     bool offload_capable, std::shared_ptr<const ShardCodec> codec)
    : name_(std::move(name)),
      slots_(std::move(slots)),
      trainable_(trainable),
      shard_group_(std::move(shard_group)),
      replicate_(std::move(replicate)),
      mem_(mem),
      offload_capable_(offload_capable),
      param_dtype_(param_dtype),
      reduce_dtype_(reduce_dtype),
      codec_(std::move(codec)) {
  ZS_CHECK(!slots_.empty(), "unit '", name_, "' has no parameters to flatten");
  const bool encoded = codec_ != nullptr;
  ZS_CHECK(!encoded || (!trainable_ && !offload_capable_), "unit '", name_, "': an encoded (", codec_->name(),
           ") shard is frozen and resident");
  // Encoded: every parameter starts a block, and every rank's shard is whole blocks.
  const int64_t align = encoded ? codec_->alignment() : 1;
  int64_t offset = 0;
  for (ParamSlot& s : slots_) {
    offset = (offset + align - 1) / align * align;
    s.offset = offset;
    s.numel = s.param.numel();
    s.shape = s.param.sizes().vec();
    offset += s.numel;
  }
  const int n = shard_group_->size();
  numel_ = offset;
  padded_ = (numel_ + n * align - 1) / (n * align) * (n * align);
  shard_numel_ = padded_ / n;
  aliased_ = n == 1 && param_dtype_ == c10::kFloat && !offload_capable_ && !encoded;
  grad_ = detail::resident_grad(shard_numel_, mem_);
}

FlatParam::~FlatParam() {
  drop_secondary();
  grad_.reset();
  storage_.reset();
  if (full_allocated_ && !aliased_) mem_->sub(MemCategory::kGatheredParams, lp_bytes(padded_));
  if (grad_buffer_.defined()) mem_->sub(MemCategory::kGradBuffers, lp_bytes(padded_));
  mem_->sub(MemCategory::kCommBuffers, staged_bytes_);
}

detail::ShardShape FlatParam::shape() const { return {name_, shard_numel_, device_, param_dtype_, mem_}; }

int64_t FlatParam::lp_bytes(int64_t elements) const {
  return elements * static_cast<int64_t>(c10::elementSize(param_dtype_));
}
int64_t FlatParam::rd_bytes(int64_t elements) const {
  return elements * static_cast<int64_t>(c10::elementSize(reduce_dtype_));
}

void FlatParam::rename(std::string name,
                       const std::vector<std::pair<std::string, std::vector<std::string>>>& slot_names) {
  ZS_CHECK(slot_names.size() == slots_.size(), "renaming ", slots_.size(), " parameters of '", name_, "' with ",
           slot_names.size(), " names");
  name_ = std::move(name);
  if (storage_ != nullptr) storage_->rename(name_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].name = slot_names[i].first;
    slots_[i].aliases = slot_names[i].second;
  }
}

void FlatParam::check_params() const {
  const ParamSlot& first = slots_.front();
  for (const ParamSlot& s : slots_) {
    ZS_REQUIRE(s.param.device() == first.param.device(), UsageError, "parameter '", s.name, "' is on ",
               s.param.device().str(), " but parameter '", first.name, "' of the same unit '", name_, "' is on ",
               first.param.device().str(), "; move the whole model to one device before wrapping it");
    ZS_REQUIRE(s.param.scalar_type() == at::kFloat, UsageError, "parameter '", s.name, "' of unit '", name_,
               "' has dtype ", c10::toString(s.param.scalar_type()),
               "; zeroshard keeps fp32 master weights: build the model in fp32 and choose the compute "
               "dtype with the precision policy");
  }
}

void FlatParam::init_from_params(Communicator* sync_from) {
  check_params();
  device_ = slots_.front().param.device();
  c10::AutoGradMode no_grad(false);
  const bool sync = sync_from != nullptr && sync_from->size() > 1;
  const int64_t lo = aliased_ ? 0 : shard_begin();
  const int64_t hi = lo + (aliased_ ? padded_ : shard_numel_);
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  at::Tensor shard = at::zeros({hi - lo}, fp32);
  // Each parameter (rank 0's values when syncing) gives this rank's part of it to the shard and
  // lets go of its storage at once: building a unit holds its bytes once, never the parameters and
  // a whole flat copy of them together (the rank's shards plus one unit, measured in
  // test_pretrained).
  for (ParamSlot& s : slots_) {
    at::Tensor p = s.param.detach().contiguous();
    if (sync) sync_from->broadcast(p, 0, name_ + ".sync." + s.name)->wait();
    // Checked on the whole parameter, which every rank holds alike, so every rank fails together.
    ZS_REQUIRE(codec_ == nullptr || at::isfinite(p).all().item<bool>(), UsageError, codec_ ? codec_->name() : "",
               " encoding of parameter '", s.name, "' of unit '", name_,
               "': a value is not finite (nan or inf); only finite weights can be stored encoded");
    const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
    if (a < b) shard.narrow(0, a - lo, b - a).copy_(p.reshape({-1}).narrow(0, a - s.offset, b - a));
    s.param.set_data(at::empty({0}, p.options()));
  }
  if (codec_ != nullptr) {
    storage_ = detail::encoded_shard(shape(), shard, codec_);
    storage_->release(nullptr);  // encoded; the fp32 values go
  } else {
    storage_ = detail::resident_shard(shape(), shard);
  }
  if (aliased_) {
    full_ = shard;
    point_params_at(full_);
    drop_param_grads();
    return;
  }
  // The gathered buffer exists from now on (the parameters are views of it), its storage freed
  // until a forward gathers it.
  full_ = at::empty({padded_}, fp32.dtype(param_dtype_));
  full_allocated_ = true;
  mem_->add(MemCategory::kGatheredParams, lp_bytes(padded_));
  point_params_at(full_);
  free_full();
  drop_param_grads();
}

void FlatParam::point_params_at(const at::Tensor& flat) {
  for (ParamSlot& s : slots_) s.param.set_data(flat.narrow(0, s.offset, s.numel).view(s.shape));
}

void FlatParam::attach_store(ShardStore* store, bool keep_param_dtype_copy) {
  ZS_CHECK(offload_capable_ && storage_ != nullptr && !storage_->stored() && !aliased_, "attach_store on unit '",
           name_, "' that was not built for an offloaded shard, or twice");
  at::Tensor values = storage_->values();
  storage_.reset();  // its bytes leave the account before the store's resident copy enters it
  try {
    storage_ = detail::stored_shard(shape(), values, store, keep_param_dtype_copy);
  } catch (...) {
    storage_ = detail::resident_shard(shape(), values);  // nothing moved: the shard stays as it was
    throw;
  }
  storage_->release(nullptr);  // written to the store (a failed write keeps it resident, modified)
}

void FlatParam::attach_grad_store(ShardStore* store) {
  ZS_CHECK(trainable_ && !grad_->stored() && !grad_->shard().defined(), "attach_grad_store on unit '", name_,
           "': frozen, attached twice, or with a gradient");
  grad_ = detail::stored_grad(shard_numel_, mem_, store, name_, device_);
}

void FlatParam::alloc_full_storage() {
  // The caching allocator allocates on the thread's current device: make it the parameter's, so a
  // thread whose current device is another GPU (a user's, a prefetch's) cannot place it there.
  c10::OptionalDeviceGuard guard;
  if (!device_.is_cpu()) guard.reset_device(device_);
  c10::StorageImpl* impl = full_.storage().unsafeGetStorageImpl();
  c10::Allocator* alloc = impl->allocator() ? impl->allocator() : c10::GetAllocator(device_.type());
  const size_t nbytes = static_cast<size_t>(lp_bytes(padded_));
  impl->set_data_ptr_noswap(alloc->allocate(nbytes));
  impl->set_nbytes(nbytes);
  full_allocated_ = true;
  mem_->add(MemCategory::kGatheredParams, lp_bytes(padded_));
}

std::shared_ptr<Work> FlatParam::start_gather(const std::string& tag, int64_t* elements, int64_t* bytes) {
  if (gathered()) return nullptr;
  alloc_full_storage();
  if (secondary_.defined()) {  // hpZ: the slices kept after the forward, gathered inside the secondary group
    *elements += padded_;
    if (bytes != nullptr) *bytes += lp_bytes(padded_);
    return secondary_group_->all_gather_into(full_, secondary_, tag + ".hpz");
  }
  return storage_->gather({full_, shard_group_.get(), tag, elements, bytes, gather_quant_block_, &gather_staging_});
}

void FlatParam::free_full() {
  storage_->gather_freed();
  for (const at::Tensor& t : gather_staging_) mem_->sub(MemCategory::kCommBuffers, t.numel());
  gather_staging_.clear();
  if (aliased_ || !full_allocated_) return;
  c10::StorageImpl* impl = full_.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, device_));
  impl->set_nbytes(0);
  full_allocated_ = false;
  mem_->sub(MemCategory::kGatheredParams, lp_bytes(padded_));
}

void FlatParam::keep_secondary() {
  if (secondary_group_ == nullptr || secondary_.defined() || aliased_ || !full_allocated_) return;
  const int64_t len = padded_ / secondary_group_->size();
  c10::AutoGradMode no_grad(false);
  secondary_ = full_.narrow(0, secondary_group_->rank() * len, len).clone();
  mem_->add(MemCategory::kGatheredParams, lp_bytes(len));
}

void FlatParam::drop_secondary() noexcept {
  if (!secondary_.defined()) return;
  mem_->sub(MemCategory::kGatheredParams, lp_bytes(secondary_.numel()));
  secondary_ = at::Tensor();
}

at::Tensor FlatParam::gather_values(const std::string& tag) {
  const at::Tensor& shard = storage_->for_read();
  if (aliased_) return shard.clone();
  at::Tensor out = at::empty({padded_}, shard.options());
  shard_group_->all_gather_into(out, shard, tag)->wait();
  return out;
}

void FlatParam::prepare_grads() {
  if (!trainable_) return;
  if (!grad_buffer_.defined()) {
    grad_buffer_ = at::empty({padded_}, at::TensorOptions().dtype(param_dtype_).device(device_));
    mem_->add(MemCategory::kGradBuffers, lp_bytes(padded_));
    grad_taken_.assign(slots_.size(), 0);
    // Everything outside the parameters' ranges (alignment gaps, padding) is reduced as zeros.
    if (grad_gaps_.empty()) grad_gaps_ = gaps_between_slots();
    for (const auto& [at, n] : grad_gaps_) {
      if (n > 0) grad_buffer_.narrow(0, at, n).zero_();
    }
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    ParamSlot& s = slots_[i];
    at::Tensor& g = s.param.mutable_grad();
    if (!grad_taken_[i]) {
      g = at::Tensor();  // autograd sets its own gradient tensor; take_grad copies it in
      continue;
    }
    const char* want = static_cast<const char*>(grad_buffer_.data_ptr()) + s.offset * grad_buffer_.element_size();
    if (!g.defined() || g.is_meta() || g.data_ptr() != want) {
      g = grad_buffer_.narrow(0, s.offset, s.numel).view(s.shape);
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> FlatParam::gaps_between_slots() const {
  std::vector<std::pair<int64_t, int64_t>> ranges, gaps;
  for (const ParamSlot& s : slots_) ranges.emplace_back(s.offset, s.offset + s.numel);
  std::sort(ranges.begin(), ranges.end());
  int64_t end = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > end) gaps.emplace_back(end, lo - end);
    end = std::max(end, hi);
  }
  gaps.emplace_back(end, padded_ - end);  // the padding (possibly empty: marks the list computed)
  return gaps;
}

void FlatParam::take_grad(size_t slot) {
  if (!trainable_ || !grad_buffer_.defined() || slot >= slots_.size() || grad_taken_[slot]) return;
  ParamSlot& s = slots_[slot];
  at::Tensor& g = s.param.mutable_grad();
  if (!g.defined() || g.is_meta()) return;  // no gradient came (an undefined one): zeros at the reduction
  c10::AutoGradMode no_grad(false);
  at::Tensor view = grad_buffer_.narrow(0, s.offset, s.numel).view(s.shape);
  if (g.data_ptr() != view.data_ptr()) {  // else autograd added into the view itself
    view.copy_(g.is_sparse() ? g.to_dense() : g);
    g = view;
  }
  grad_taken_[slot] = 1;
}

void FlatParam::zero_missing_grads() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!grad_taken_[i]) grad_buffer_.narrow(0, slots_[i].offset, slots_[i].numel).zero_();
  }
}

// A parameter's .grad is never its gradient (that lives in the flat gradient buffer during
// backward and in the fp32 shard afterwards). Between backward passes it is a meta-device tensor
// of the parameter's shape, so code that reads .grad believing it holds the gradient fails
// loudly instead of doing nothing: a torch::optim optimizer over model->parameters() ("Expected
// all tensors to be on the same device, ... meta and cpu") or torch::nn::utils::clip_grad_norm_
// ("... 'aten::_local_scalar_dense' with arguments from the 'Meta' backend"). It holds no memory;
// prepare_grads replaces it before autograd accumulates into it. docs/sharding.md says what to
// call instead (engine.step, engine.clip_grad_norm, engine.param_shards).
void FlatParam::drop_param_grads() {
  if (!trainable_) return;
  for (ParamSlot& s : slots_) {
    s.param.mutable_grad() = at::empty(s.shape, at::TensorOptions().dtype(s.param.scalar_type()).device(c10::kMeta));
  }
}

void FlatParam::release_grad_buffer(std::vector<at::Tensor>* retired) {
  if (!grad_buffer_.defined()) return;
  drop_param_grads();
  grad_taken_.assign(slots_.size(), 0);
  if (retired != nullptr) retired->push_back(std::move(grad_buffer_));
  grad_buffer_ = at::Tensor();
  mem_->sub(MemCategory::kGradBuffers, lp_bytes(padded_));
}

void FlatParam::start_reduce(const std::string& tag, int64_t* elements, int64_t* bytes) {
  if (!grad_buffer_.defined() || pending_out_.defined()) return;
  zero_missing_grads();
  const bool replicated = replicate_ && replicate_->size() > 1;
  // Gradients are reduced in reduce_dtype (a cast copy when it differs from param_dtype).
  at::Tensor input = reduce_dtype_ == param_dtype_ ? grad_buffer_ : grad_buffer_.to(reduce_dtype_);
  if (shard_group_->size() == 1) {
    // Nothing to scatter: the whole buffer is this rank's shard of the gradient, averaged over
    // the replicas (NO_SHARD) by an all-reduce that finish_reduce waits for.
    pending_out_ = input;
    staged_bytes_ = input.is_same(grad_buffer_) ? 0 : rd_bytes(padded_);
    mem_->add(MemCategory::kCommBuffers, staged_bytes_);
    if (replicated) {
      pending_ar_ = replicate_->all_reduce(pending_out_, ReduceOp::kAvg, tag);
      *elements += 2 * padded_;  // an all-reduce moves a reduce-scatter plus an all-gather
      *bytes += 2 * padded_ * static_cast<int64_t>(pending_out_.element_size());
    }
    return;
  }
  pending_out_ = at::empty({shard_numel_}, input.options());
  staged_bytes_ = rd_bytes(shard_numel_);
  mem_->add(MemCategory::kCommBuffers, staged_bytes_);  // the reduce-scatter's output, in flight
  if (reduce_quant_block_ > 0) {
    pending_rs_ = shard_group_->reduce_scatter_int8_into(pending_out_, input, ReduceOp::kAvg, reduce_quant_block_, tag);
    *bytes += shard_group_->size() * quant::int8_encoded_bytes(shard_numel_, reduce_quant_block_);
  } else {
    pending_rs_ = shard_group_->reduce_scatter_into(pending_out_, input, ReduceOp::kAvg, tag);
    *bytes += padded_ * static_cast<int64_t>(input.element_size());
  }
  *elements += padded_;
}

bool FlatParam::advance_reduce(const std::string& tag, int64_t* elements, int64_t* bytes,
                               std::vector<at::Tensor>* retired) {
  if (!pending_out_.defined()) start_reduce(tag, elements, bytes);
  if (pending_rs_) {
    pending_rs_->wait();
    pending_rs_.reset();
    if (replicate_ && replicate_->size() > 1) {
      pending_ar_ = replicate_->all_reduce(pending_out_, ReduceOp::kAvg, tag + ".replicas");
      *elements += 2 * shard_numel_;
      *bytes += 2 * shard_numel_ * static_cast<int64_t>(pending_out_.element_size());
    }
  }
  // The buffer is free once no collective reads it: after the reduce-scatter, or at once when
  // the reduction works on a cast copy. An all-reduce in place on it keeps it.
  if (pending_out_.defined() && !pending_out_.is_same(grad_buffer_)) release_grad_buffer(retired);
  return pending_ar_ != nullptr;
}

void FlatParam::finish_reduce(const std::string& tag, int64_t* elements, int64_t* bytes,
                              std::vector<at::Tensor>* retired) {
  if (!grad_buffer_.defined() && !pending_out_.defined()) return;
  advance_reduce(tag, elements, bytes, retired);
  if (pending_ar_) {
    pending_ar_->wait();
    pending_ar_.reset();
  }
  c10::AutoGradMode no_grad(false);
  at::Tensor reduced = pending_out_.scalar_type() == at::kFloat ? pending_out_ : pending_out_.to(at::kFloat);
  mem_->sub(MemCategory::kCommBuffers, staged_bytes_);
  staged_bytes_ = 0;
  pending_out_ = at::Tensor();
  release_grad_buffer(retired);
  grad_->add(std::move(reduced));
  // Stored gradients go to the store at once, written behind the rest of backward (the engine
  // flushes the store at the end of backward; a failed write keeps the values in memory).
  grad_->release(/*write_behind=*/true);
}

void FlatParam::abandon_reduce() noexcept {
  for (std::shared_ptr<Work>* w : {&pending_rs_, &pending_ar_}) {
    if (*w == nullptr) continue;
    try {
      (*w)->wait();
    } catch (...) {  // a failed collective: its communicator reports it at the next use
    }
    w->reset();
  }
  mem_->sub(MemCategory::kCommBuffers, staged_bytes_);
  staged_bytes_ = 0;
  pending_out_ = at::Tensor();
  release_grad_buffer(nullptr);
  drop_param_grads();
}

}  // namespace zeroshard
