// SPDX-License-Identifier: Apache-2.0
#include <sstream>

#include "zeroshard/comm/communicator.h"

namespace zeroshard {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kReduceScatterInt8: return "reduce_scatter_int8";
  }
  return "?";
}

std::string CollectiveSignature::to_string() const {
  std::ostringstream os;
  os << "#" << seq << " " << zeroshard::to_string(kind);
  if (kind != CollectiveKind::kBarrier) {
    os << "(" << c10::toString(dtype) << ", count=" << count;
    if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce ||
        kind == CollectiveKind::kReduceScatterInt8) {
      os << ", op=" << zeroshard::to_string(op);
    }
    if (kind == CollectiveKind::kBroadcast) os << ", root=" << root;
    os << ")";
  }
  os << " tag='" << tag << "'";
  if (!comm.empty()) os << " on " << comm;
  return os.str();
}

bool CollectiveSignature::matches(const CollectiveSignature& o) const {
  return seq == o.seq && kind == o.kind && dtype == o.dtype && count == o.count && op == o.op &&
         root == o.root && tag == o.tag;
}

}  // namespace zeroshard
