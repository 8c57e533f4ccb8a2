// SPDX-License-Identifier: Apache-2.0
// GGUF exports carry the model's tokenizer (zeroshard/models/gguf_vocabulary.h), checked against
// llama.cpp (node-llama-cpp, tests/clients): tiny random-weight models with real vocabularies
// (Llama 2's SentencePiece-style tokenizer.json, Llama 3's and a Qwen2-style byte-level BPE, all
// written by tests/text/make_tokenizers.mjs from the pinned npm vocabularies; a SentencePiece BPE
// tokenizer.model trained here by the SentencePiece library) are exported, and llama.cpp's
// tokenization of a set of texts must equal zeroshard's encode id by id, its detokenization give
// the text back, and its BOS/EOS choice match. Plus the refusals with their messages.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "common/error_text.h"
#include "common/sanitizer.h"
#include "models/llama_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/models/gguf_export.h"
#include "zeroshard/models/gguf_vocabulary.h"
#include "zeroshard/text/tokenizer.h"

namespace zs = zeroshard;
using zs::test::message_of;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;

namespace {

const std::string kWork = ZS_GGUF_VOCAB_DIR;
const std::string kModules = ZS_CLIENTS_MODULES;

void run(const std::string& command) {
  const std::string err = kWork + "/last-command.stderr";
  const int rc = std::system((command + " 2>" + err).c_str());
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_EQ(rc, 0) << command << "\n" << text.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// A SentencePiece BPE model with byte fallback (as Llama's tokenizer.model is trained: no
// normalization, whitespace kept), one with SentencePiece's default normalization and a
// Unigram one, trained on a few lines by the SentencePiece library.
const char* kTrainSentencePiece = R"(import sys, sentencepiece as spm
out = sys.argv[1]
lines = ["The quick brown fox jumps over the lazy dog.", "Digits 1234567 and 3.14, punctuation!?",
         "Hello world, hello there; leading spaces and tabs.", "It's a test: don't, won't, can't.",
         "Tokenizers split text into pieces; models read the pieces."] * 40
open(out + "/train.txt", "w").write("\n".join(lines) + "\n")
for name, extra in (("spm-bpe", dict(model_type="bpe", byte_fallback=True, split_digits=True, vocab_size=400,
                               normalization_rule_name="identity", remove_extra_whitespaces=False,
                               allow_whitespace_only_pieces=True)),
                    ("spm-bpe-nfkc", dict(model_type="bpe", byte_fallback=True, vocab_size=400)),
                    ("spm-unigram", dict(model_type="unigram", vocab_size=60))):
    spm.SentencePieceTrainer.train(input=out + "/train.txt", model_prefix=out + "/" + name, minloglevel=2,
                                   num_threads=1, **extra)
)";

// The tokenizer files, written once per run.
const std::string& tokenizers() {
  static const std::string dir = [] {
    const std::string d = kWork + "/tokenizers";
    EXPECT_TRUE(fs::exists(kModules + "/llama3-tokenizer-js"))
        << "the test clients are missing from '" << kModules << "': run scripts/install-clients.sh BUILD_DIR";
    if (!fs::exists(d + "/cases.json")) {
      fs::create_directories(d);
      run("node " ZS_SOURCE_DIR "/tests/text/make_tokenizers.mjs " + kModules + " " + d + " >/dev/null");
      write_file(kWork + "/train_spm.py", kTrainSentencePiece);
      run("/usr/bin/python3 " + kWork + "/train_spm.py " + d);
      for (const char* name : {"spm-bpe", "spm-bpe-nfkc", "spm-unigram"}) {
        fs::create_directories(d + "/" + name);
        fs::rename(d + "/" + name + ".model", d + "/" + name + "/tokenizer.model");
      }
    }
    return d;
  }();
  return dir;
}

// A tiny model of `vocab` ids with the tokenizer files of `tokenizer` copied beside its weights.
std::string model_with_tokenizer(const std::string& name, const std::string& tokenizer, int64_t vocab) {
  zs_llama_test::TinySpec spec;
  spec.vocab = vocab;
  spec.hidden = 16;
  spec.intermediate = 32;
  spec.layers = 1;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.tied = true;
  const std::string dir = kWork + "/" + name;
  fs::remove_all(dir);
  zs_llama_test::write_hf_dir(dir, spec.config_json(), zs_llama_test::random_state(spec.config(), 7), 1);
  for (const char* file : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) {
    if (fs::exists(tokenizer + "/" + file)) fs::copy_file(tokenizer + "/" + file, dir + "/" + file);
  }
  return dir;
}

std::vector<std::string> texts(const zs::text::Tokenizer& tok) {
  return {"Hello world",
          " leading space",
          "   three leading spaces",
          "digits 1234567 and 3.14159",
          "punctuation!?... (yes), [no]; \"quoted\" 'single' don't it's",
          "Unicode: caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
          "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD done",
          "line one\nline two\n\n\tindented\r\n",
          "trailing spaces   ",
          "before " + tok.eos_token() + " after"};
}

// Exports `name` through the Hugging Face directory path (its own tokenizer found there), has
// llama.cpp tokenize `texts` from the GGUF, and compares with zeroshard's encode.
void check_against_llama_cpp(const std::string& name, const std::string& tokenizer, bool sentencepiece,
                             int64_t extra_ids = 0) {
  const std::unique_ptr<zs::text::Tokenizer> tok = zs::text::load_tokenizer(tokenizer);
  const std::string dir = model_with_tokenizer(name, tokenizer, tok->vocab_size() + extra_ids);
  const zm::GgufExportReport r = zm::export_gguf(dir, dir + ".gguf", {});
  EXPECT_EQ(r.tokenizer, dir);
  const std::vector<std::string> inputs = texts(*tok);
  const nlohmann::ordered_json jobs = {
      {{"gguf", dir + ".gguf"}, {"texts", inputs}, {"out", dir + ".llama_cpp.json"}}};
  write_file(dir + ".jobs.json", jobs.dump());
  ASSERT_NO_FATAL_FAILURE(run("node " ZS_SOURCE_DIR "/tests/models/gguf_tokenize.mjs --modules " + kModules +
                              " --jobs " + dir + ".jobs.json"));
  std::ifstream in(dir + ".llama_cpp.json");
  const nlohmann::json got = nlohmann::json::parse(in);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ours = tok->encode(inputs[i], false);
    EXPECT_EQ(got["ids"][i].get<std::vector<int32_t>>(), ours) << name << ": '" << inputs[i] << "'";
    // llama.cpp's detokenizer cleans up " '" for llama-bpe (as Llama 3's tokenizer_config.json
    // asks with clean_up_tokenization_spaces), whatever the GGUF says.
    // After a special token, llama.cpp's SentencePiece detokenizer keeps the space it prepended
    // ("</s>  after"): only the ids are compared there.
    std::string text = inputs[i];
    if (name == "llama3") text = std::regex_replace(text, std::regex(" '"), "'");
    if (!sentencepiece || text.find(tok->eos_token()) == std::string::npos) {
      EXPECT_EQ(got["text"][i].get<std::string>(), text) << name;
    }
  }
  const std::vector<int32_t> plain = tok->encode("a", false), full = tok->encode("a", true);
  const bool adds_bos = full.size() > plain.size() && full.front() != plain.front();
  EXPECT_EQ(got["add_bos"].get<bool>(), adds_bos) << name;
  EXPECT_EQ(got["add_eos"].get<bool>(), full.size() > plain.size() + (adds_bos ? 1 : 0)) << name;
  if (adds_bos) EXPECT_EQ(got["bos"].get<int32_t>(), full.front()) << name;
}

}  // namespace

// Padded: the model has 16 more ids than the tokenizer.
TEST(GgufVocabulary, Llama2SentencePieceStyleTokenizerJson) {
  check_against_llama_cpp("llama2", tokenizers() + "/llama2", true, 16);
}

TEST(GgufVocabulary, Llama3ByteLevelBpe) { check_against_llama_cpp("llama3", tokenizers() + "/llama3", false); }

TEST(GgufVocabulary, Qwen2StyleByteLevelBpe) { check_against_llama_cpp("qwen2", tokenizers() + "/qwen2-style", false); }

TEST(GgufVocabulary, SentencePieceBpeModel) {
  ZS_SKIP_SENTENCEPIECE_UNDER_ASAN();
  check_against_llama_cpp("spm-bpe", tokenizers() + "/spm-bpe", true);
}

TEST(GgufVocabulary, PaddingTokensAreUnused) {
  const zs::gguf::Vocabulary v = zm::gguf_vocabulary(tokenizers() + "/llama2", 32005);
  ASSERT_EQ(v.size(), 32005);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.tokens[32004], "[PAD32004]");
  EXPECT_EQ(v.types[32004], zs::gguf::TokenType::kUnused);
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.types[0], zs::gguf::TokenType::kUnknown);
  EXPECT_EQ(v.types[1], zs::gguf::TokenType::kControl);
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.types[3], zs::gguf::TokenType::kByte);
  const zs::gguf::Vocabulary l3 = zm::gguf_vocabulary(tokenizers() + "/llama3", 128256);
  EXPECT_EQ(l3.pre, "llama-bpe");
  EXPECT_EQ(l3.types[128000], zs::gguf::TokenType::kControl);
  EXPECT_EQ(zm::gguf_vocabulary(tokenizers() + "/gpt2", 50260).pre, "gpt-2");
}

TEST(GgufVocabulary, Refusals) {
  const std::string t = tokenizers();
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(t + "/llama2", 31000); }),
            t + "/llama2/tokenizer.json: the tokenizer has 32000 tokens, more than the model's vocab_size 31000");
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(t + "/o200k", 200019); }),
            t + "/o200k/tokenizer.json: the pre-tokenizer splits by '" +
                nlohmann::json::parse(std::ifstream(t + "/o200k/tokenizer.json"))["pre_tokenizer"]["pretokenizers"][0]
                                     ["pattern"]["Regex"]
                                         .get<std::string>() +
                "', which matches none of the llama.cpp pre-tokenizers this export knows (gpt-2: GPT-2's ByteLevel "
                "regex, llama-bpe: Llama 3's, qwen2: Qwen2's)");
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(t + "/llama2-metaspace", 32000); }),
            t + "/llama2-metaspace/tokenizer.json: pre_tokenizer: a Metaspace pre-tokenizer with prepend_scheme 'first' "
                "cannot be written to GGUF (its SentencePiece tokenizer prepends '\xE2\x96\x81' to every text and after "
                "every special token); export the model's SentencePiece tokenizer.model instead");
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(t + "/llama3-original", 128256); }),
            t + "/llama3-original/tokenizer.model: a tiktoken rank file cannot be written to GGUF (supported: "
                "tokenizer.json, SentencePiece BPE tokenizer.model)");
  const std::string wordpiece = kWork + "/wordpiece";
  fs::create_directories(wordpiece);
  write_file(wordpiece + "/tokenizer.json",
             R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"}})");
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(wordpiece, 2); }),
            wordpiece + "/tokenizer.json: the tokenizer model type 'WordPiece' cannot be written to GGUF (supported: "
                        "BPE, byte-level or SentencePiece-style with byte_fallback)");
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(kWork, 2); }),
            kWork + ": no tokenizer.json or tokenizer.model in this directory");
}

TEST(GgufVocabulary, RefusedSentencePieceModels) {
  ZS_SKIP_SENTENCEPIECE_UNDER_ASAN();
  const std::string t = tokenizers();
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(t + "/spm-bpe-nfkc", 400); }),
            t + "/spm-bpe-nfkc/tokenizer.model: a SentencePiece model with normalization 'nmt_nfkc' that removes extra "
                "whitespace cannot be written to GGUF (llama.cpp's SentencePiece tokenizer does neither; supported: "
                "normalization 'identity' keeping whitespace, as Llama and Mistral use)");
  EXPECT_EQ(message_of([&] { zm::gguf_vocabulary(t + "/spm-unigram", 60); }),
            t + "/spm-unigram/tokenizer.model: a SentencePiece Unigram model cannot be written to GGUF (supported: "
                "SentencePiece BPE, as Llama and Mistral use)");
}
