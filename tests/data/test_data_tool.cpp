// SPDX-License-Identifier: Apache-2.0
// zeroshard-data end to end: shards from text and JSONL with the byte vocabulary, inspect, index,
// and the exact message of each bad input.

#include <gtest/gtest.h>

#include "common/error_text.h"
#include "data/data_test_util.h"
#include "zeroshard/data/packing.h"
#include "zeroshard/data/shard_manifest.h"
#include "zeroshard/data/token_shards.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;

namespace {

// The tool's stdout and stderr together; *status its exit status.
std::string tool(const std::string& args, int* status) {
  return zs::test::run_command(std::string(ZS_DATA_TOOL) + " " + args + " 2>&1", status);
}

// Only its stderr.
std::string tool_errors(const std::string& args, int* status) {
  return zs::test::run_command(std::string(ZS_DATA_TOOL) + " " + args + " 2>&1 >/dev/null", status);
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n') + 1); }

}  // namespace

TEST(DataTool, MakesShardsAndInspectsThem) {
  zs::test::RankDir dir("data_tool_shards");
  const std::string d = dir.path;
  zs::test::write_bytes(d + "/a.jsonl", "{\"text\": \"hello\"}\n{\"prompt\": \"Q\", \"completion\": \"A\"}\n\n"
                                        "{\"text\": \"bye\"}\n");
  zs::test::write_bytes(d + "/b.txt", "plain\n");
  int status = 0;
  std::string out = tool("shards --tokenizer bytes --no-eos --seq-len 4 --progress none --out " + d + "/out " + d +
                             "/a.jsonl " + d + "/b.txt",
                         &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(first_line(out), "wrote 1 shard(s) to " + d +
                                 "/out (llm.c format, uint16 tokens): 16 tokens in 4 documents, 15 of them trained "
                                 "(93.8%)\n");
  EXPECT_TRUE(zs::test::contains(out, "\nseq_len 4: 3 packed samples; padded, 4 samples (one per document), 1 of "
                                      "them truncated (longer than 5 tokens)\n"))
      << out;
  EXPECT_TRUE(zs::test::contains(zs::test::read_bytes(d + "/out/shard_manifest.json"),
                                 "\"documents\":4,\"tokens\":16,\"trained_tokens\":15"));
  const zd::TokenShards shards({d + "/out/*.bin"}, {zd::TokenFormat::kLlmc, 256});
  std::vector<int32_t> ids(16);
  shards.read(0, 16, ids.data());
  EXPECT_EQ(std::string(ids.begin(), ids.end()), "helloQAbyeplain\n");
  std::vector<uint8_t> mask(16);
  shards.read_loss_mask(0, 16, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));

  // The manifest reads back (by folder or by file) with what the tool wrote.
  const zd::ShardManifest m = zd::read_shard_manifest(d + "/out");
  EXPECT_EQ(m.path, d + "/out/shard_manifest.json");
  EXPECT_EQ(m.tokenizer, "bytes");
  EXPECT_EQ(m.vocab_size, 256);
  EXPECT_FALSE(m.eos_id.has_value()) << "--no-eos";
  EXPECT_EQ(m.shard_paths(), std::vector<std::string>{d + "/out/shard_000000.bin"});
  EXPECT_EQ(m.shards.at(0).tokens, 16);
  EXPECT_EQ(m.shards.at(0).trained_tokens, 15);
  EXPECT_EQ(zd::read_shard_manifest(m.path).documents, 4);
  EXPECT_TRUE(zd::is_shard_set(d + "/out"));
  EXPECT_TRUE(zd::is_shard_set(m.path));
  EXPECT_FALSE(zd::is_shard_set(d + "/a.jsonl"));

  out = tool("inspect --tokens 5 " + d + "/out/shard_000000.bin", &status);
  EXPECT_EQ(status, 0);
  const std::string shard = d + "/out/shard_000000";
  EXPECT_EQ(out, shard + ".bin: llm.c token shard, magic 20240520 version 1, uint16 tokens\n"
                         "  tokens: 16 (32 bytes after 1024 header bytes)\n"
                         "  documents: 4 (" + shard + ".docs)\n"
                         "  loss mask: " + shard + ".mask\n"
                         "  first 5 tokens: 104 101 108 108 111\n");
  // Progress lines (not a terminal) on stderr: the last one at 100%.
  out = tool_errors("shards --tokenizer bytes --no-eos --progress lines --out " + d + "/out2 " + d + "/a.jsonl " + d +
                        "/b.txt",
                    &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.rfind("100% 76 B of 76 B | ", 0), 0u) << out;
  // A second run into the same folder would mix old and new shards.
  out = tool("shards --tokenizer bytes --no-eos --progress none --out " + d + "/out " + d + "/b.txt", &status);
  EXPECT_NE(status, 0);
  EXPECT_EQ(out, "zeroshard-data: '" + d + "/out' already holds shards (" + d +
                     "/out/shard_000000.bin); new ones would mix with them: remove them or write to another folder\n");
}

// Shards made elsewhere (documents ending with EOT 9): index writes their document index, and
// then they can be padded one document per sample.
TEST(DataTool, IndexesShardsMadeElsewhere) {
  zs::test::RankDir dir("data_tool_index");
  const std::string path = dir.path + "/x.bin";
  zs::test::write_bytes(path, zs::test::llmc_header(20240520, 1, 8) +
                                  zs::test::token_bytes<uint16_t>({9, 1, 2, 9, 3, 9, 4, 5}));
  int status = 0;
  std::string out = tool("index --eos-id 9 " + path, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, dir.path + "/x.docs: 4 documents\n");
  const auto shards = std::make_shared<zd::TokenShards>(std::vector<std::string>{path},
                                                        zd::ShardSetOptions{zd::TokenFormat::kLlmc, 10});
  const zd::PaddedSamples padded(shards, {3, 0});
  ASSERT_EQ(padded.num_samples(), 4);
  EXPECT_EQ(padded.read_batch({1}).inputs, (std::vector<int32_t>{1, 2, 9}));
  EXPECT_EQ(padded.read_batch({3}).targets, (std::vector<int32_t>{5, 0, 0}));
  out = tool("index --eos-id 9 " + path, &status);
  EXPECT_EQ(out, "zeroshard-data: '" + dir.path + "/x.docs' exists already; remove it to index '" + path +
                     "' again\n");
}

// Bad input: one line on stderr each, exactly, and a failing exit status.
TEST(DataTool, SaysWhatIsWrongWithBadInput) {
  zs::test::RankDir dir("data_tool_errors");
  const std::string d = dir.path;
  zs::test::write_bytes(d + "/bad.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"prompt\": \"x\"}\n");
  zs::test::write_bytes(d + "/magic.bin", zs::test::llmc_header(1234, 1, 1) + zs::test::token_bytes<uint16_t>({1}));
  zs::test::write_bytes(d + "/short.bin", zs::test::llmc_header(20240520, 1, 3) + zs::test::token_bytes<uint16_t>({1}));
  zs::test::write_bytes(d + "/vocab.bin",
                        zs::test::llmc_header(20240520, 1, 3) + zs::test::token_bytes<uint16_t>({1, 300, 2}));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"shards --tokenizer bytes --progress none --out " + d + "/o1 " + d + "/bad.jsonl",
       "zeroshard-data: usage error: the tokenizer 'bytes' has no end-of-text token to put between documents; pass "
       "--no-eos to write documents without one (the document index still separates them)\n"},
      {"shards --tokenizer bytes --no-eos --progress none --out " + d + "/o2 " + d + "/bad.jsonl",
       "zeroshard-data: " + d + "/bad.jsonl:3: a record with \"prompt\" needs \"completion\" too\n"},
      {"inspect " + d + "/magic.bin",
       "zeroshard-data: token shard '" + d + "/magic.bin' is not an llm.c token shard: magic 1234 at byte 0, "
       "expected 20240520 (uint16 tokens) or 20240801 (uint32 tokens); a headerless token file needs the format "
       "uint16 or uint32\n"},
      {"inspect " + d + "/short.bin",
       "zeroshard-data: token shard '" + d + "/short.bin' is truncated: its header says 3 tokens (6 bytes after the "
       "1024-byte header) but the file holds 2 bytes after the header\n"},
      {"inspect --vocab 256 " + d + "/vocab.bin",
       "zeroshard-data: token shard '" + d + "/vocab.bin': token id 300 at token offset 1 is outside the model's "
       "vocabulary (256 ids: 0..255)\n"},
      {"shard --out x", "zeroshard-data: usage error: unknown command 'shard' (commands: decode, encode, index, inspect, shards; "
                        "zeroshard-data --help)\n"},
  };
  for (const auto& [args, message] : cases) {
    int status = 0;
    EXPECT_EQ(tool_errors(args, &status), message) << args;
    EXPECT_NE(status, 0) << args;
  }
}

TEST(DataTool, ShardManifestErrorsNameTheFileAndWhat) {
  zs::test::RankDir dir("data_tool_manifest");
  const std::string d = dir.path;
  EXPECT_EQ(zs::test::message_of<zs::UsageError>([&] { zd::read_shard_manifest(d); }),
            "'" + d + "' holds no *_manifest.json: a set of token shards is complete once zeroshard-data shards has "
            "written its manifest");
  const std::string good = "{\"format\":\"llmc\",\"token_bytes\":2,\"tokenizer\":\"bytes\",\"vocab_size\":256,"
                           "\"documents\":1,\"tokens\":3,\"trained_tokens\":3,\"shards\":[{\"file\":\"x.bin\","
                           "\"tokens\":3,\"documents\":1,\"trained_tokens\":3}]}";
  zs::test::write_bytes(d + "/a_manifest.json", good);
  EXPECT_EQ(zs::test::message_of<zs::DataError>([&] { zd::read_shard_manifest(d); }),
            "shard manifest '" + d + "/a_manifest.json' lists 'x.bin', which is not in '" + d + "'");
  zs::test::write_bytes(d + "/b_manifest.json", good.substr(0, 40));
  EXPECT_EQ(zs::test::message_of<zs::UsageError>([&] { zd::read_shard_manifest(d); }),
            "'" + d + "' holds 2 shard manifests ('a_manifest.json', 'b_manifest.json'): name the one to use");
  EXPECT_CONTAINS(zs::test::message_of<zs::DataError>([&] { zd::read_shard_manifest(d + "/b_manifest.json"); }),
                  "shard manifest '" + d + "/b_manifest.json' is not valid JSON: ");
  std::string no_vocab = good;
  no_vocab.replace(no_vocab.find("\"vocab_size\":256"), 16, "\"vocab_size\":\"x\"");
  zs::test::write_bytes(d + "/b_manifest.json", no_vocab);
  EXPECT_EQ(zs::test::message_of<zs::DataError>([&] { zd::read_shard_manifest(d + "/b_manifest.json"); }),
            "shard manifest '" + d + "/b_manifest.json': \"vocab_size\" is missing or not an integer");
}
