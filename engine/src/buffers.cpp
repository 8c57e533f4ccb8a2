// SPDX-License-Identifier: Apache-2.0
#include "buffers.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <map>

namespace zeroshard::detail {
namespace {

constexpr int64_t kAlign = 16;  // every buffer's bytes start aligned, so views of any dtype work

}  // namespace

void broadcast_buffers(Communicator& comm, const std::vector<at::Tensor>& buffers, int root, const std::string& tag) {
  if (comm.size() == 1) return;
  std::vector<std::pair<at::Tensor, int64_t>> placed;  // buffer, byte offset
  int64_t bytes = 0;
  for (const at::Tensor& b : buffers) {
    if (!b.defined() || b.numel() == 0) continue;
    placed.emplace_back(b, bytes);
    bytes += (static_cast<int64_t>(b.nbytes()) + kAlign - 1) / kAlign * kAlign;
  }
  if (placed.empty()) return;
  c10::AutoGradMode no_grad(false);
  at::Tensor packed = at::empty({bytes}, placed.front().first.options().dtype(at::kByte));
  auto bytes_of = [&](const at::Tensor& b, int64_t offset) { return packed.narrow(0, offset, static_cast<int64_t>(b.nbytes())); };
  if (comm.rank() == root) {
    for (const auto& [b, offset] : placed) bytes_of(b, offset).copy_(b.contiguous().view({-1}).view(at::kByte));
  }
  comm.broadcast(packed, root, tag)->wait();
  if (comm.rank() == root) return;
  for (const auto& [b, offset] : placed) {
    at::Tensor buffer = b;  // copy_ is non-const
    buffer.copy_(bytes_of(b, offset).view(b.scalar_type()).view(b.sizes()));
  }
}

void average_buffers(Communicator& comm, const std::vector<at::Tensor>& buffers, const std::string& tag) {
  if (comm.size() == 1) return;
  std::map<c10::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const at::Tensor& b : buffers) {
    if (b.defined() && b.numel() > 0 && c10::isFloatingType(b.scalar_type())) by_dtype[b.scalar_type()].push_back(b);
  }
  c10::AutoGradMode no_grad(false);
  for (auto& [dtype, list] : by_dtype) {
    std::vector<at::Tensor> flat;
    flat.reserve(list.size());
    for (const at::Tensor& b : list) flat.push_back(b.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    comm.all_reduce(packed, ReduceOp::kAvg, tag)->wait();
    int64_t offset = 0;
    for (at::Tensor& b : list) {
      b.copy_(packed.narrow(0, offset, b.numel()).view(b.sizes()));
      offset += b.numel();
    }
  }
}

}  // namespace zeroshard::detail
