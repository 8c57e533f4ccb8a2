// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tokenized data for a language model with a tokenizer of its own (a Hugging Face model
// directory), as a Dataset the Trainer reads.
//
//   zeroshard::TokenizedCorpus corpus({{"chat.jsonl"}, model_dir, cfg.vocab_size, 512, s.rank(), s.local_world_size()}, *tok);
//   auto samples = corpus.packed(512);                                  // packed, never attending across documents
//   auto train = std::make_shared<zeroshard::LmSampleDataset>(samples, 0, n_train, cfg.vocab_size);
//   // train->get(i): data int64 [3, T] (inputs, positions, document numbers), target int64 [T]
//   task.loss = [&](const Batch& b) { return lm_nll_sum(model->forward(lm_ids(b), lm_positions(b), lm_documents(b)), b.target); };
//   task.loss_items = [](const Batch& b) { return double(lm_trained_tokens(b)); };   // the mean over the global batch's tokens
//
// JSONL records ({"text"}, {"prompt", "completion"} with the prompt untrained, {"messages"}
// rendered by the tokenizer's chat template with only assistant turns trained) are tokenized by
// every rank into a temporary folder of its own (the same shards on every rank, so nothing needs a
// shared file system), removed with the object; or the input is one folder of token shards
// `zeroshard-data shards --tokenizer MODEL_DIR` made (its vocabulary and end-of-text id checked
// against the tokenizer's).
// Thread-safety: LmSampleDataset::get is const and thread-safe (the loader's workers call it).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/data/sample.h"
#include "zeroshard/data/shard_manifest.h"
#include "zeroshard/train/dataset.h"
#include "zeroshard/train/loader.h"

namespace zeroshard {

namespace text {
class Tokenizer;
}

struct TokenizedCorpusOptions {
  std::vector<std::string> inputs;  // JSONL files, read in this order, or one folder of token shards
  std::string tokenizer_dir;        // where the tokenizer (and its chat template) came from
  int64_t vocab_size = 0;           // the model's: token ids are checked against it
  int64_t seq_len = 0;              // > 0: documents longer than seq_len + 1 tokens are counted
  int rank = 0;                     // names this rank's temporary folder
  int local_world_size = 1;         // the tokenizing threads share this host's cores with the other ranks
  std::string what = "data.path";   // how errors name the inputs (a config key, a flag)
};

class TokenizedCorpus {
 public:
  // UsageError for no input, a shard folder mixed with other inputs, or shards made with another
  // vocabulary or end-of-text id (naming the folder and how to remake them); the tokenizer's and
  // the JSONL reader's errors (file, line) otherwise.
  TokenizedCorpus(const TokenizedCorpusOptions& options, const text::Tokenizer& tokenizer);
  ~TokenizedCorpus();  // removes the temporary folder
  TokenizedCorpus(const TokenizedCorpus&) = delete;
  TokenizedCorpus& operator=(const TokenizedCorpus&) = delete;

  const std::vector<std::string>& paths() const { return paths_; }
  const data::ShardManifest& manifest() const { return manifest_; }
  // The shards packed into samples of `seq_len` tokens that keep the loss mask and attend only
  // within their document (data/packing.h).
  std::shared_ptr<const data::SampleSource> packed(int64_t seq_len) const;

 private:
  std::string dir_;  // the shards this rank built, or "" for a shard set made elsewhere
  std::vector<std::string> paths_;
  data::ShardManifest manifest_;
  int64_t vocab_size_ = 0;
};

// Samples [first, first + count) of `source` as a Dataset (see the header comment). DataError
// naming the sample and position for a token id outside [0, vocab_size); UsageError for a range
// outside the source.
class LmSampleDataset : public Dataset {
 public:
  LmSampleDataset(std::shared_ptr<const data::SampleSource> source, int64_t first, int64_t count, int64_t vocab_size);
  int64_t size() const override { return count_; }
  Example get(int64_t index) const override;
  int64_t seq_len() const;

 private:
  std::shared_ptr<const data::SampleSource> source_;
  int64_t first_, count_, vocab_size_;
};

// The parts of a batch of LmSampleDataset examples (data [B, 3, T]): int64 [B, T] each.
at::Tensor lm_ids(const Batch& b);
at::Tensor lm_positions(const Batch& b);
at::Tensor lm_documents(const Batch& b);

// The summed next-token NLL over the trained targets (target != -100) of logits [B, T, V] (fp32
// math), with a gradient, and their count in a batch: TrainTask::loss and loss_items of a mean
// over the global batch's tokens.
at::Tensor lm_nll_sum(const at::Tensor& logits, const at::Tensor& targets);
int64_t lm_trained_tokens(const Batch& b);
// Each sample's mean NLL over its trained targets, fp32 [B] (0 for a sample with none).
at::Tensor lm_per_sample_nll(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace zeroshard
