// SPDX-License-Identifier: Apache-2.0
// TokenizedCorpus and LmSampleDataset (lm_data.h): JSONL or token shards -> packed samples -> the
// Trainer's examples, and the masked next-token losses.

#include "zeroshard/train/lm_data.h"

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/empty.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "zeroshard/base/error.h"
#include "zeroshard/data/chat.h"
#include "zeroshard/data/corpus_builder.h"
#include "zeroshard/data/encode.h"
#include "zeroshard/data/packing.h"
#include "zeroshard/data/token_shards.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard {

namespace fs = std::filesystem;

TokenizedCorpus::TokenizedCorpus(const TokenizedCorpusOptions& o, const text::Tokenizer& tok)
    : vocab_size_(o.vocab_size) {
  ZS_REQUIRE(!o.inputs.empty(), UsageError, o.what, ": no training data: give a JSONL file or a folder of token shards");
  for (const std::string& in : o.inputs) {
    ZS_REQUIRE(fs::exists(in), UsageError, o.what, " '", in, "': no such file or folder");
    ZS_REQUIRE(!data::is_shard_set(in) || o.inputs.size() == 1, UsageError, o.what, " '", in,
               "' is a set of token shards; give it alone (it cannot be mixed with other ", o.what, " inputs)");
  }
  const std::string remedy = ": make them with zeroshard-data shards --tokenizer " + o.tokenizer_dir;
  if (data::is_shard_set(o.inputs.front())) {
    data::ShardManifest m = data::read_shard_manifest(o.inputs.front());
    // Shards made elsewhere must hold what this tokenizer would have made: the same vocabulary and
    // end-of-text id (the ids themselves are checked against the model as they are read).
    ZS_REQUIRE(m.vocab_size == tok.vocab_size(), UsageError, o.what, " '", o.inputs.front(),
               "': the shards were tokenized with a vocabulary of ", m.vocab_size, " ids (tokenizer '", m.tokenizer,
               "'), the model's tokenizer has ", tok.vocab_size(), remedy);
    const std::string theirs = m.eos_id ? std::to_string(*m.eos_id) : "none";
    const std::string ours = tok.eos_id() ? std::to_string(*tok.eos_id()) : "none";
    ZS_REQUIRE(theirs == ours, UsageError, o.what, " '", o.inputs.front(), "': the shards end their documents "
               "with token ", theirs, ", the model's tokenizer with ", ours, remedy);
    paths_ = m.shard_paths();
    manifest_ = std::move(m);
    return;
  }
  dir_ = (fs::temp_directory_path() /
          ("zeroshard-finetune-" + std::to_string(::getpid()) + "-rank" + std::to_string(o.rank)))
             .string();
  fs::remove_all(dir_);
  data::ChatSpanFn chat;
  if (!tok.chat_template().empty()) {
    chat = data::template_spans(tok, tok.chat_template(), o.tokenizer_dir + "/tokenizer_config.json");
  }
  const data::RecordEncoder encoder(tok, chat, {tok.eos_id(), o.vocab_size});
  data::BuildOptions b;
  b.inputs = o.inputs;
  b.writer = {dir_, "train", o.vocab_size};
  b.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, o.local_world_size));
  b.seq_len = o.seq_len;
  const data::BuildResult r = data::build_shards(b, encoder);
  const std::optional<int64_t> eos = tok.eos_id() ? std::optional<int64_t>(*tok.eos_id()) : std::nullopt;
  manifest_ = data::manifest_of(r, o.tokenizer_dir, tok.vocab_size(), eos);
  for (const data::WrittenShard& w : r.shards) paths_.push_back(w.path);
}

TokenizedCorpus::~TokenizedCorpus() {
  std::error_code ignored;
  if (!dir_.empty()) fs::remove_all(dir_, ignored);
}

std::shared_ptr<const data::SampleSource> TokenizedCorpus::packed(int64_t seq_len) const {
  return std::make_shared<data::PackedSamples>(
      std::make_shared<data::TokenShards>(paths_, data::ShardSetOptions{data::TokenFormat::kLlmc, vocab_size_}),
      data::PackOptions{seq_len, data::Boundaries::kIndex, -1});
}

LmSampleDataset::LmSampleDataset(std::shared_ptr<const data::SampleSource> source, int64_t first, int64_t count,
                                 int64_t vocab_size)
    : source_(std::move(source)), first_(first), count_(count), vocab_size_(vocab_size) {
  ZS_REQUIRE(source_ != nullptr, UsageError, "LmSampleDataset: no sample source");
  ZS_REQUIRE(first >= 0 && count >= 0 && first + count <= source_->num_samples(), UsageError,
             "LmSampleDataset: samples [", first, ", ", first + count, ") lie outside the source's ",
             source_->num_samples(), " samples");
}

int64_t LmSampleDataset::seq_len() const { return source_->seq_len(); }

Example LmSampleDataset::get(int64_t index) const {
  ZS_REQUIRE(index >= 0 && index < count_, UsageError, "LmSampleDataset: sample ", index, " of ", count_);
  const int64_t t = source_->seq_len();
  data::SampleBatch row;
  row.resize(1, t);
  const int64_t id = first_ + index;
  source_->read(id, row.row(0));
  at::Tensor d = at::empty({3, t}, at::kLong), target = at::empty({t}, at::kLong);
  int64_t* ids = d.data_ptr<int64_t>();
  int64_t* tg = target.data_ptr<int64_t>();
  for (int64_t j = 0; j < t; ++j) {
    const int32_t in = row.inputs[j], next = row.targets[j];
    const bool trained = row.loss_mask[j] != 0;
    ZS_REQUIRE(in >= 0 && in < vocab_size_ && (!trained || (next >= 0 && next < vocab_size_)), DataError,
               "sample ", id, ", position ", j, ": token id ", (in >= 0 && in < vocab_size_ ? next : in),
               " is outside the model's vocabulary of ", vocab_size_, " ids");
    ids[j] = in;
    ids[t + j] = row.positions[j];
    ids[2 * t + j] = row.doc_ids[j];
    tg[j] = trained ? next : -100;
  }
  return {d, target};
}

at::Tensor lm_ids(const Batch& b) { return b.data.select(1, 0); }
at::Tensor lm_positions(const Batch& b) { return b.data.select(1, 1); }
at::Tensor lm_documents(const Batch& b) { return b.data.select(1, 2); }

namespace {
at::Tensor per_token_nll(const at::Tensor& logits, const at::Tensor& targets) {
  ZS_REQUIRE(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                 logits.size(1) == targets.size(1) && targets.scalar_type() == at::kLong,
             UsageError, "next-token loss: logits [B, T, vocab] and int64 targets [B, T] expected, got ",
             logits.sizes(), " and ", targets.sizes());
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(2)}), targets.reshape({-1}), {},
                                at::Reduction::None, -100)
      .view(targets.sizes());
}
}  // namespace

at::Tensor lm_nll_sum(const at::Tensor& logits, const at::Tensor& targets) {
  return per_token_nll(logits, targets).sum();
}

int64_t lm_trained_tokens(const Batch& b) { return b.target.ne(-100).sum().item<int64_t>(); }

at::Tensor lm_per_sample_nll(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor nll = per_token_nll(logits, targets);
  return nll.sum(1).div(targets.ne(-100).sum(1).to(at::kFloat).clamp_min(1));
}

}  // namespace zeroshard
