#include "zeroshard/sharding/flat_param.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>

#include <utility>

#include "zeroshard/base/error.h"

namespace zeroshard {

FlatParam::FlatParam(std::string name, std::vector<ParamSlot> slots, bool trainable,
                     std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate,
                     MemoryStats* mem, c10::ScalarType param_dtype, c10::ScalarType reduce_dtype)
    : name_(std::move(name)),
      slots_(std::move(slots)),
      trainable_(trainable),
      shard_group_(std::move(shard_group)),
      replicate_(std::move(replicate)),
      mem_(mem),
      param_dtype_(param_dtype),
      reduce_dtype_(reduce_dtype) {
  ZS_CHECK(!slots_.empty(), "unit '", name_, "' has no parameters to flatten");
  int64_t offset = 0;
  for (ParamSlot& s : slots_) {
    s.offset = offset;
    s.numel = s.param.numel();
    s.shape = s.param.sizes().vec();
    offset += s.numel;
  }
  const int n = shard_group_->size();
  numel_ = offset;
  padded_ = (numel_ + n - 1) / n * n;
  shard_numel_ = padded_ / n;
  aliased_ = n == 1 && param_dtype_ == c10::kFloat;
}

FlatParam::~FlatParam() {
  mem_->sub(MemCategory::kShardedParams, bytes(shard_numel_));
  if (full_allocated_ && !aliased_) mem_->sub(MemCategory::kGatheredParams, lp_bytes(padded_));
  if (grad_buffer_.defined()) mem_->sub(MemCategory::kGradBuffers, lp_bytes(padded_));
  if (grad_shard_.defined()) mem_->sub(MemCategory::kGradShards, bytes(shard_numel_));
}

int64_t FlatParam::bytes(int64_t elements) const { return elements * 4; }
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
  const int64_t lo = aliased_ ? 0 : static_cast<int64_t>(shard_group_->rank()) * shard_numel_;
  const int64_t hi = lo + (aliased_ ? padded_ : shard_numel_);
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  shard_ = at::zeros({hi - lo}, fp32);
  // Each parameter (rank 0's values when syncing) gives this rank's part of it to the shard and
  // lets go of its storage at once: building a unit holds its bytes once, never the parameters and
  // a whole flat copy of them together (the rank's shards plus one unit, measured in
  // test_pretrained).
  for (ParamSlot& s : slots_) {
    at::Tensor p = s.param.detach().contiguous();
    if (sync) sync_from->broadcast(p, 0, name_ + ".sync." + s.name)->wait();
    const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
    if (a < b) shard_.narrow(0, a - lo, b - a).copy_(p.reshape({-1}).narrow(0, a - s.offset, b - a));
    s.param.set_data(at::empty({0}, p.options()));
  }
  mem_->add(MemCategory::kShardedParams, bytes(shard_numel_));
  if (aliased_) {
    full_ = shard_;
    point_params_at(full_);
    return;
  }
  // The gathered buffer exists from now on (the parameters are views of it), its storage freed
  // until a forward gathers it.
  full_ = at::empty({padded_}, fp32.dtype(param_dtype_));
  full_allocated_ = true;
  mem_->add(MemCategory::kGatheredParams, lp_bytes(padded_));
  point_params_at(full_);
  free_full();
}

void FlatParam::point_params_at(const at::Tensor& flat) {
  for (ParamSlot& s : slots_) s.param.set_data(flat.narrow(0, s.offset, s.numel).view(s.shape));
}

bool FlatParam::gathered() const { return aliased_ || full_allocated_; }

void FlatParam::alloc_full_storage() {
  c10::StorageImpl* impl = full_.storage().unsafeGetStorageImpl();
  c10::Allocator* alloc = impl->allocator() ? impl->allocator() : c10::GetAllocator(device_.type());
  const size_t nbytes = static_cast<size_t>(lp_bytes(padded_));
  impl->set_data_ptr_noswap(alloc->allocate(nbytes));
  impl->set_nbytes(nbytes);
  full_allocated_ = true;
  mem_->add(MemCategory::kGatheredParams, lp_bytes(padded_));
}

std::shared_ptr<Work> FlatParam::start_gather(const std::string& tag, int64_t* elements) {
  if (gathered()) return nullptr;
  alloc_full_storage();
  if (shard_group_->size() == 1) {
    // One rank, low precision: the "gather" is the cast itself, written straight into the full
    // buffer (bitwise what gathering the cast shard gives, without the copy or the collective).
    c10::AutoGradMode no_grad(false);
    full_.copy_(shard_);
    return nullptr;
  }
  *elements += padded_;
  // Low-precision compute gathers the shard cast to param_dtype (the Work keeps the cast alive).
  at::Tensor input = param_dtype_ == c10::kFloat ? shard_ : shard_.to(param_dtype_);
  return shard_group_->all_gather_into(full_, input, tag);
}

void FlatParam::free_full() {
  if (aliased_ || !full_allocated_) return;
  c10::StorageImpl* impl = full_.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, device_));
  impl->set_nbytes(0);
  full_allocated_ = false;
  mem_->sub(MemCategory::kGatheredParams, lp_bytes(padded_));
}

void FlatParam::prepare_grads() {
  if (!trainable_) return;
  if (!grad_buffer_.defined()) {
    grad_buffer_ = at::zeros({padded_}, at::TensorOptions().dtype(param_dtype_).device(device_));
    mem_->add(MemCategory::kGradBuffers, lp_bytes(padded_));
  }
  for (ParamSlot& s : slots_) {
    at::Tensor& g = s.param.mutable_grad();
    const char* want = static_cast<const char*>(grad_buffer_.data_ptr()) + s.offset * grad_buffer_.element_size();
    if (!g.defined() || g.data_ptr() != want) {
      g = grad_buffer_.narrow(0, s.offset, s.numel).view(s.shape);
    }
  }
}

void FlatParam::drop_param_grads() {
  for (ParamSlot& s : slots_) s.param.mutable_grad() = at::Tensor();
}

void FlatParam::start_reduce(const std::string& tag, int64_t* elements) {
  if (!grad_buffer_.defined() || reduce_pending()) return;
  const bool replicated = replicate_ && replicate_->size() > 1;
  if (aliased_) {
    pending_out_ = grad_buffer_;
    if (replicated) {
      pending_ar_ = replicate_->all_reduce(grad_buffer_, ReduceOp::kAvg, tag);
      *elements += 2 * padded_;  // an all-reduce moves a reduce-scatter plus an all-gather
    }
    return;
  }
  // Gradients are reduced in reduce_dtype (a cast copy when it differs from param_dtype).
  at::Tensor input = reduce_dtype_ == param_dtype_ ? grad_buffer_ : grad_buffer_.to(reduce_dtype_);
  pending_out_ = at::empty({shard_numel_}, input.options());
  mem_->add(MemCategory::kCommBuffers, rd_bytes(shard_numel_));  // the reduce-scatter's output, in flight
  pending_rs_ = shard_group_->reduce_scatter_into(pending_out_, input, ReduceOp::kAvg, tag);
  *elements += padded_;
}

void FlatParam::finish_reduce(const std::string& tag, int64_t* elements, std::vector<at::Tensor>* retired) {
  if (!grad_buffer_.defined()) return;
  if (!reduce_pending() && !pending_out_.defined()) start_reduce(tag, elements);
  const bool staged = pending_rs_ != nullptr;  // pending_out_ is a separate comm buffer
  if (pending_rs_) {
    pending_rs_->wait();
    pending_rs_.reset();
    if (replicate_ && replicate_->size() > 1) {
      replicate_->all_reduce(pending_out_, ReduceOp::kAvg, tag + ".replicas")->wait();
      *elements += 2 * shard_numel_;
    }
  }
  if (pending_ar_) {
    pending_ar_->wait();
    pending_ar_.reset();
  }
  c10::AutoGradMode no_grad(false);
  at::Tensor reduced = pending_out_.scalar_type() == at::kFloat ? pending_out_ : pending_out_.to(at::kFloat);
  if (grad_shard_.defined()) {
    grad_shard_.add_(reduced);
  } else {
    grad_shard_ = reduced;
    mem_->add(MemCategory::kGradShards, bytes(shard_numel_));
  }
  if (staged) mem_->sub(MemCategory::kCommBuffers, rd_bytes(shard_numel_));
  pending_out_ = at::Tensor();
  drop_param_grads();
  if (retired != nullptr) retired->push_back(std::move(grad_buffer_));
  grad_buffer_ = at::Tensor();
  mem_->sub(MemCategory::kGradBuffers, lp_bytes(padded_));
}

void FlatParam::drop_grad_shard() {
  if (!grad_shard_.defined()) return;
  grad_shard_ = at::Tensor();
  mem_->sub(MemCategory::kGradShards, bytes(shard_numel_));
}

at::Tensor FlatParam::gather_values(const std::string& tag) {
  if (aliased_) return shard_.clone();
  at::Tensor out = at::empty({padded_}, shard_.options());
  shard_group_->all_gather_into(out, shard_, tag)->wait();
  return out;
}

}  // namespace zeroshard
