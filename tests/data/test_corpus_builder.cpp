// SPDX-License-Identifier: Apache-2.0
// build_shards (the engine of zeroshard-data shards): documents in input order whatever the thread
// count and piece size, the tokens and loss targets of each record, FILE:LINE of the first
// malformed line, and shards that llm.c's own checks accept.

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "data/data_test_util.h"
#include "data/test_tokenizer.h"
#include "zeroshard/data/corpus_builder.h"
#include "zeroshard/data/token_shards.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;
using zs::test::message_of;
namespace fs = std::filesystem;
using zs::test::ByteTestTokenizer;

namespace {

// 300 records of the three shapes, with blank lines among them; and a text file.
std::vector<std::string> write_inputs(const std::string& dir) {
  std::ostringstream j;
  for (int i = 0; i < 300; ++i) {
    if (i % 3 == 0) j << "{\"text\": \"doc " << i << " " << std::string(static_cast<size_t>(i % 17), 'x') << "\"}\n";
    if (i % 3 == 1) j << "{\"prompt\": \"q" << i << "\", \"completion\": \" a" << i << "\", \"id\": " << i << "}\n";
    if (i % 3 == 2) {
      j << "{\"messages\": [{\"role\": \"user\", \"content\": \"u" << i
        << "\"}, {\"role\": \"assistant\", \"content\": \"r" << i << "\"}]}\n";
    }
    if (i % 50 == 7) j << "\n   \n";
  }
  zs::test::write_bytes(dir + "/a.jsonl", j.str());
  zs::test::write_bytes(dir + "/b.txt", "a whole file\nis one document\n");
  return {dir + "/a.jsonl", dir + "/b.txt"};
}

zd::BuildResult build(const std::vector<std::string>& inputs, const std::string& out, int threads, int64_t chunk,
                      const zd::RecordEncoder& enc) {
  zd::BuildOptions o;
  o.inputs = inputs;
  o.writer = {out, "train", 259, /*shard_tokens=*/1500};
  o.threads = threads;
  o.chunk_bytes = chunk;
  o.seq_len = 16;
  return zd::build_shards(o, enc);
}

}  // namespace

// The shards hold, in order, exactly what the encoder makes of each record; the document index
// and loss mask match. The same bytes come out with 1 thread and big pieces as with 4 threads and
// pieces of 7 bytes (most lines cross several).
TEST(CorpusBuilder, WritesRecordsInOrderWhateverTheThreads) {
  zs::test::RankDir dir("data_builder");
  const std::vector<std::string> inputs = write_inputs(dir.path);
  const ByteTestTokenizer tok;
  const zd::RecordEncoder enc(tok, zs::test::test_chat_spans, {tok.eos_id()});
  const zd::BuildResult one = build(inputs, dir.path + "/one", 1, 1 << 20, enc);
  const zd::BuildResult four = build(inputs, dir.path + "/four", 4, 7, enc);
  EXPECT_EQ(one.documents, 301);
  EXPECT_EQ(four.threads, 4);
  ASSERT_GT(one.shards.size(), 3u);
  ASSERT_EQ(one.shards.size(), four.shards.size());
  for (const zd::WrittenShard& s : one.shards) {
    const std::string name = fs::path(s.path).filename().string(), stem = name.substr(0, name.size() - 4);
    for (const std::string& file : {name, stem + ".docs", stem + ".mask"}) {
      EXPECT_EQ(zs::test::read_bytes(dir.path + "/one/" + file), zs::test::read_bytes(dir.path + "/four/" + file))
          << file;
    }
  }
  // What the encoder makes of each record, concatenated.
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;
  std::vector<int64_t> starts;
  auto add = [&](const zd::Document& d) {
    starts.push_back(static_cast<int64_t>(tokens.size()));
    tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
    trained.insert(trained.end(), d.trained.begin(), d.trained.end());
  };
  zd::for_each_record(inputs[0], [&](const zd::Record& r, int64_t) { add(enc.encode(r)); });
  zd::Record text;
  text.text = "a whole file\nis one document\n";
  add(enc.encode(text));
  const zd::TokenShards shards({dir.path + "/four/train_*.bin"}, {zd::TokenFormat::kLlmc, 259});
  ASSERT_EQ(shards.num_tokens(), static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(four.tokens, shards.num_tokens());
  std::vector<int32_t> got(tokens.size());
  std::vector<uint8_t> got_mask(tokens.size());
  shards.read(0, shards.num_tokens(), got.data());
  shards.read_loss_mask(0, shards.num_tokens(), got_mask.data());
  EXPECT_EQ(got, tokens);
  EXPECT_EQ(got_mask, trained);
  ASSERT_EQ(shards.num_documents(), 301);
  std::vector<int64_t> got_starts = {0};
  shards.document_starts(0, shards.num_tokens(), &got_starts);
  EXPECT_EQ(got_starts, starts);
  int64_t trained_count = 0, longer = 0;
  for (uint8_t t : trained) trained_count += t;
  for (size_t d = 0; d < starts.size(); ++d) {
    const int64_t end = d + 1 < starts.size() ? starts[d + 1] : static_cast<int64_t>(tokens.size());
    longer += end - starts[d] > 17;
  }
  EXPECT_EQ(four.trained_tokens, trained_count);
  EXPECT_EQ(four.longer_than_seq, longer);
  // llm.c's checks (magic, version, size) accept the shard and read the same tokens.
  int status = 0;
  const std::string out = zs::test::run_command(
      "/usr/bin/python3 " + std::string(ZS_TEST_SOURCE_DIR) + "/data/llmc_reference.py read " + four.shards[0].path,
      &status);
  ASSERT_EQ(status, 0);
  std::istringstream in(out);
  int64_t magic = 0, version = 0, count = 0, v = 0;
  in >> magic >> version >> count;
  EXPECT_EQ(magic, 20240520);
  EXPECT_EQ(version, 1);
  ASSERT_EQ(count, four.shards[0].tokens);
  for (int64_t i = 0; in >> v; ++i) ASSERT_EQ(v, tokens[static_cast<size_t>(i)]) << i;
}

// The first malformed line in input order is reported with its line number, however the file
// was cut into pieces and whichever worker met an error first.
TEST(CorpusBuilder, ReportsTheFirstMalformedLine) {
  zs::test::RankDir dir("data_builder_errors");
  std::ostringstream j;
  for (int i = 1; i <= 200; ++i) {
    if (i == 137) j << "{\"text\": \"unterminated}\n";
    else if (i == 180) j << "{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}\n";
    else if (i % 10 == 0) j << "\n";
    else j << "{\"text\": \"line " << i << "\"}\n";
  }
  zs::test::write_bytes(dir.path + "/bad.jsonl", j.str());
  const ByteTestTokenizer tok;
  const zd::RecordEncoder enc(tok, zs::test::test_chat_spans, {tok.eos_id()});
  for (int64_t chunk : {int64_t{13}, int64_t{1000}, int64_t{1} << 20}) {
    const std::string out = dir.path + "/out" + std::to_string(chunk);
    EXPECT_EQ(message_of([&] { build({dir.path + "/bad.jsonl"}, out, 3, chunk, enc); }),
              dir.path + "/bad.jsonl:137: bad JSON at column 24: syntax error while parsing value - invalid string: "
                         "missing closing quote; last read: '\"unterminated}'")
        << chunk;
  }
  EXPECT_EQ(message_of([&] { build({dir.path + "/missing.jsonl"}, dir.path + "/o", 1, 100, enc); })
                .rfind("cannot open input file '" + dir.path + "/missing.jsonl': ", 0),
            0u);
}

// A record whose tokens the shards cannot hold (an id at or above the shards' vocabulary) is named
// by FILE:LINE, as a malformed one is; a whole text file by its name.
TEST(CorpusBuilder, ATokenBeyondTheShardsVocabularyNamesItsRecord) {
  zs::test::RankDir dir("data_builder_vocab");
  std::ostringstream j;
  for (int i = 1; i <= 40; ++i) j << (i == 23 ? "{\"text\": \"price <pad> 5\"}\n" : "{\"text\": \"plain\"}\n");
  zs::test::write_bytes(dir.path + "/v.jsonl", j.str());
  zs::test::write_bytes(dir.path + "/v.txt", "costs <pad>\n");
  const ByteTestTokenizer tok;
  // No EOS; BOS (256) fits the shards' 258 ids, the <pad> token (258) does not.
  const zd::RecordEncoder enc(tok, zs::test::test_chat_spans, {});
  for (int64_t chunk : {int64_t{9}, int64_t{1} << 20}) {
    zd::BuildOptions o;
    o.inputs = {dir.path + "/v.jsonl"};
    o.writer = {dir.path + "/out" + std::to_string(chunk), "train", /*vocab_size=*/258, 1500};
    o.threads = 2;
    o.chunk_bytes = chunk;
    EXPECT_EQ(message_of([&] { zd::build_shards(o, enc); }),
              dir.path + "/v.jsonl:23: token id 258 is outside the vocabulary of 258 ids")
        << chunk;
  }
  zd::BuildOptions o;
  o.inputs = {dir.path + "/v.txt"};
  o.writer = {dir.path + "/out_txt", "train", 258, 1500};
  EXPECT_EQ(message_of([&] { zd::build_shards(o, enc); }),
            dir.path + "/v.txt: token id 258 is outside the vocabulary of 258 ids");
}
