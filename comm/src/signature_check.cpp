// SPDX-License-Identifier: Apache-2.0
#include "signature_check.h"

#include <ATen/ops/empty.h>

#include <cstring>

#include "zeroshard/base/error.h"

namespace zeroshard::comm {

WireSignature to_wire(const CollectiveSignature& sig) {
  WireSignature w;
  std::memset(&w, 0, sizeof(w));
  w.seq = sig.seq;
  w.count = sig.count;
  w.kind = static_cast<int32_t>(sig.kind);
  w.dtype = static_cast<int32_t>(sig.dtype);
  w.op = static_cast<int32_t>(sig.op);
  w.root = sig.root;
  std::strncpy(w.tag, sig.tag.c_str(), kWireTagBytes - 1);
  return w;
}

CollectiveSignature from_wire(const WireSignature& w, const std::string& comm) {
  CollectiveSignature s;
  s.seq = w.seq;
  s.count = w.count;
  s.kind = static_cast<CollectiveKind>(w.kind);
  s.dtype = static_cast<c10::ScalarType>(w.dtype);
  s.op = static_cast<ReduceOp>(w.op);
  s.root = w.root;
  s.tag = std::string(w.tag, strnlen(w.tag, kWireTagBytes));
  s.comm = comm;
  return s;
}

std::string describe_divergence(const std::vector<WireSignature>& all, const std::string& comm) {
  if (all.empty()) return {};
  CollectiveSignature first = from_wire(all[0], comm);
  for (size_t r = 1; r < all.size(); ++r) {
    CollectiveSignature other = from_wire(all[r], comm);
    if (!first.matches(other)) {
      return detail::concat("collective signatures diverge on communicator '", comm, "': rank 0 called ",
                            first.to_string(), " but rank ", r, " called ", other.to_string(),
                            ". Every rank must issue the same collectives in the same order "
                            "(check for rank-dependent control flow or module structure).");
    }
  }
  return {};
}

void check_signatures_agree(Communicator& via, const CollectiveSignature& sig) {
  const int n = via.size();
  constexpr int64_t kBytes = sizeof(WireSignature);
  at::Tensor mine = at::empty({kBytes}, at::kByte);
  at::Tensor all = at::empty({kBytes * n}, at::kByte);
  WireSignature w = to_wire(sig);
  std::memcpy(mine.data_ptr(), &w, kBytes);
  via.all_gather_into(all, mine, "zs.signature_check")->wait();
  std::vector<WireSignature> records(n);
  std::memcpy(records.data(), all.data_ptr(), kBytes * n);
  std::string msg = describe_divergence(records, sig.comm);
  if (!msg.empty()) ZS_THROW(CommError, msg);
}

}  // namespace zeroshard::comm
