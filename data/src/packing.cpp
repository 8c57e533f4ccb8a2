// SPDX-License-Identifier: Apache-2.0
// Packed and padded fixed-length samples over token shards (packing.h).

#include "zeroshard/data/packing.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "zeroshard/base/error.h"

namespace zeroshard::data {

Boundaries parse_boundaries(const std::string& text, const std::string& option) {
  if (text == "index") return Boundaries::kIndex;
  if (text == "eos") return Boundaries::kEos;
  if (text == "none") return Boundaries::kNone;
  ZS_THROW(UsageError, option, " '", text, "' is not a source of document boundaries (index, eos, none)");
}

namespace {

void require_id_in_vocabulary(const TokenShards& shards, int64_t id, const char* what) {
  const int64_t vocab = shards.options().vocab_size;
  ZS_REQUIRE(vocab <= 0 || id < vocab, UsageError, what, " ", id, " is outside the model's vocabulary (", vocab,
             " ids)");
}

void check_id(int64_t id, int64_t n) {
  ZS_REQUIRE(id >= 0 && id < n, UsageError, "sample ", id, " is outside [0, ", n, ")");
}

}  // namespace

PackedSamples::PackedSamples(std::shared_ptr<const TokenShards> shards, PackOptions options)
    : shards_(std::move(shards)), options_(options) {
  ZS_REQUIRE(shards_ != nullptr, UsageError, "PackedSamples: no shards");
  ZS_REQUIRE(options.seq_len >= 1, UsageError, "the sequence length (", options.seq_len, ") must be at least 1");
  ZS_REQUIRE(options.boundaries != Boundaries::kIndex || shards_->has_doc_index(), UsageError,
             "document boundaries from the index need document indexes next to the shards (",
             docs_path_for(shards_->file(0).path()),
             "); zeroshard-data index writes them, or take the boundaries from end-of-text tokens (eos)");
  ZS_REQUIRE(options.boundaries != Boundaries::kEos || options.eos_id >= 0, UsageError,
             "document boundaries from end-of-text tokens need the eos id");
  if (options.boundaries == Boundaries::kEos) require_id_in_vocabulary(*shards_, options.eos_id, "the eos id");
  num_samples_ = std::max<int64_t>(0, shards_->num_tokens() - 1) / options.seq_len;
  ZS_REQUIRE(num_samples_ > 0, DataError, "the shards hold ", shards_->num_tokens(),
             " tokens, fewer than one sample of ", options.seq_len, " positions needs (", options.seq_len + 1, ")");
}

void PackedSamples::find_starts(int64_t begin, const std::vector<int32_t>& window,
                                std::vector<uint8_t>* starts) const {
  const auto n = static_cast<int64_t>(window.size());
  starts->assign(window.size(), 0);
  if (options_.boundaries == Boundaries::kEos) {
    for (int64_t k = 1; k < n; ++k) (*starts)[k] = window[k - 1] == options_.eos_id;
  } else if (options_.boundaries == Boundaries::kIndex) {
    std::vector<int64_t> global;
    shards_->document_starts(begin, begin + n, &global);
    for (int64_t g : global) (*starts)[g - begin] = 1;
  }
}

void PackedSamples::read(int64_t id, const SampleRow& out) const {
  check_id(id, num_samples_);
  const int64_t len = options_.seq_len, begin = id * len;
  std::vector<int32_t> window(static_cast<size_t>(len + 1));
  std::vector<uint8_t> trained(window.size()), starts;
  shards_->read(begin, len + 1, window.data());
  shards_->read_loss_mask(begin, len + 1, trained.data());
  find_starts(begin, window, &starts);
  int32_t doc = 0;
  int64_t doc_start = 0;
  for (int64_t j = 0; j < len; ++j) {
    if (starts[j]) ++doc, doc_start = j;
    out.inputs[j] = window[j];
    out.targets[j] = window[j + 1];
    out.loss_mask[j] = trained[j + 1] && !starts[j + 1];
    out.doc_ids[j] = doc;
    out.positions[j] = static_cast<int32_t>(j - doc_start);
  }
}

PaddedSamples::PaddedSamples(std::shared_ptr<const TokenShards> shards, PadOptions options)
    : shards_(std::move(shards)), options_(options) {
  ZS_REQUIRE(shards_ != nullptr, UsageError, "PaddedSamples: no shards");
  ZS_REQUIRE(options.seq_len >= 1, UsageError, "the sequence length (", options.seq_len, ") must be at least 1");
  ZS_REQUIRE(options.pad_id >= 0, UsageError, "padded samples need a pad id (got ", options.pad_id, ")");
  require_id_in_vocabulary(*shards_, options.pad_id, "the pad id");
  ZS_REQUIRE(shards_->has_doc_index(), UsageError, "padded samples (one document each) need document indexes next "
             "to the shards (", docs_path_for(shards_->file(0).path()), "); zeroshard-data index writes them");
  num_samples_ = shards_->num_documents();
  ZS_REQUIRE(num_samples_ > 0, DataError, "the shards hold no document");
}

void PaddedSamples::read(int64_t id, const SampleRow& out) const {
  check_id(id, num_samples_);
  const auto [begin, end] = shards_->document(id);
  const int64_t len = options_.seq_len;
  const int64_t m = std::min(end - begin, len + 1);  // the document's tokens in this sample
  std::vector<int32_t> tokens(static_cast<size_t>(m));
  std::vector<uint8_t> trained(tokens.size());
  shards_->read(begin, m, tokens.data());
  shards_->read_loss_mask(begin, m, trained.data());
  const int32_t pad = options_.pad_id;
  for (int64_t j = 0; j < len; ++j) {
    const bool real = j < m, has_target = j + 1 < m;
    out.inputs[j] = real ? tokens[j] : pad;
    out.targets[j] = has_target ? tokens[j + 1] : pad;
    out.loss_mask[j] = has_target ? trained[j + 1] : 0;
    out.doc_ids[j] = real ? 0 : 1;
    out.positions[j] = static_cast<int32_t>(real ? j : j - m);
  }
}

}  // namespace zeroshard::data
