// SPDX-License-Identifier: Apache-2.0
#pragma once
// Debug-mode cross-check of collective signatures (CommOptions::check_signatures).

#include "zeroshard/comm/communicator.h"

namespace zeroshard::comm {

// Longest tag compared across ranks; longer tags are compared on their first kWireTagBytes-1 bytes.
constexpr size_t kWireTagBytes = 96;

// Fixed-size record of a signature as exchanged between ranks.
struct WireSignature {
  uint64_t seq;
  int64_t count;
  int32_t kind;
  int32_t dtype;
  int32_t op;
  int32_t root;
  char tag[kWireTagBytes];
};

WireSignature to_wire(const CollectiveSignature& sig);
CollectiveSignature from_wire(const WireSignature& w, const std::string& comm);

// Given every rank's record (index = rank), returns "" when all agree, else a message naming rank 0's
// signature and the first rank whose signature differs.
std::string describe_divergence(const std::vector<WireSignature>& all, const std::string& comm);

// Collective over `via`: all-gathers `sig` and throws CommError on every rank if any rank differs.
// `via` must be a CPU (MPI) communicator other than the one the checked collective runs on, or the
// same one when called from its own worker before the collective.
void check_signatures_agree(Communicator& via, const CollectiveSignature& sig);

}  // namespace zeroshard::comm
