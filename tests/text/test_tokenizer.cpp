// SPDX-License-Identifier: Apache-2.0
// zeroshard::text (zeroshard/text/tokenizer.h) on small hand-written tokenizer files: the
// components whose behaviour the JavaScript references cannot check (Hugging Face's Rust semantics
// of Digits, Metaspace split, single_word, add_bos_token/add_eos_token), and every bad input with
// its exact error text. test_tokenizer_reference checks real vocabularies id by id.

#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/sanitizer.h"
#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/text/tokenizer.h"

namespace zt = zeroshard::text;
using Ids = std::vector<int32_t>;

namespace {
using zeroshard::test::message_of;

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// The message of the zeroshard::Error `fn` throws, or "" when it throws none.
// A tiny SentencePiece-style vocabulary: characters, a few merges, byte fallback for the rest.
std::string tiny_vocab() {
  return R"({"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5, "▁": 6, "a": 7, "b": 8, "c": 9,
             "ab": 10, "▁a": 11, "▁ab": 12, "1": 13, "2": 14, "12": 15, "▁▁": 16, "abc": 17, "x": 18, "d": 19,
             "aa": 20, "٣": 21, "b٣": 22})";
}

// Ranks: b٣ 0, ▁a 1, ab 2, ▁ab 3, 12 4, ▁▁ 5, abc 6, aa 7 (strings and pairs both).
std::string tiny_merges() { return R"(["b ٣", ["▁", "a"], "a b", "▁a b", "1 2", "▁ ▁", "ab c", ["a", "a"]])"; }

const std::string kSpecials = R"([{"id": 0, "content": "<unk>", "special": true, "normalized": false},
  {"id": 1, "content": "<s>", "special": true, "normalized": false},
  {"id": 2, "content": "</s>", "special": true, "normalized": false}])";

// tokenizer.json around the tiny vocabulary with the given pre-tokenizer and normalizer.
std::string tiny_json(const std::string& pre_tokenizer, const std::string& normalizer = "null",
                      const std::string& added = kSpecials, const std::string& model_extra = "") {
  return R"({"version": "1.0", "added_tokens": )" + added + R"(, "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true)" +
         model_extra + R"(, "vocab": )" + tiny_vocab() + R"(, "merges": )" + tiny_merges() + "}}";
}

struct TinyDir {
  zeroshard::test::RankDir dir;
  explicit TinyDir(const std::string& name, const std::string& json, const std::string& config = "")
      : dir(name) {
    write(dir.path + "/tokenizer.json", json);
    if (!config.empty()) write(dir.path + "/tokenizer_config.json", config);
  }
  std::unique_ptr<zt::Tokenizer> load() const { return zt::load_tokenizer(dir.path); }
};

const std::string kMetaspaceSplit =
    R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})";
const std::string kMetaspaceWhole =
    R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})";

}  // namespace

TEST(Tokenizer, MergesByRankLeftmostFirstWithByteFallbackAndBos) {
  TinyDir d("tok_merge", tiny_json(kMetaspaceWhole));
  const auto tok = d.load();
  // "▁ab▁abc": ▁a (rank 1) before ab (2), then ▁ab (3); "ab c" never gets its "ab".
  EXPECT_EQ(tok->encode("ab abc"), (Ids{1, 12, 12, 9}));
  EXPECT_EQ(tok->encode("ab abc", false), (Ids{12, 12, 9}));
  // Without a ▁ before it, "a b" merges: "▁cab▁abc" -> ▁ c ab ▁ab c.
  EXPECT_EQ(tok->encode("cab abc", false), (Ids{6, 9, 10, 12, 9}));
  EXPECT_EQ(tok->encode("é"), (Ids{1, 6, 4, 5}));          // no token for é: its two byte tokens
  EXPECT_EQ(tok->encode("a€€b", false), (Ids{11, 0, 8}));  // € has no byte tokens: one fused <unk>
  EXPECT_EQ(tok->decode({1, 12, 12, 9}), "<s> ab abc");
  EXPECT_EQ(tok->decode({1, 12, 12, 9}, true), "ab abc");
  EXPECT_EQ(tok->decode({6, 4, 5, 3}), "é\n");
  EXPECT_EQ(tok->decode({6, 4}), "\xEF\xBF\xBD");  // a lone byte is not UTF-8: one U+FFFD per byte
  EXPECT_EQ(tok->vocab_size(), 23);
  EXPECT_EQ(tok->token_to_id("abc"), 17);
  EXPECT_EQ(tok->token_to_id("zzz"), std::nullopt);
  EXPECT_EQ(tok->id_to_token(16), "▁▁");
}

TEST(Tokenizer, EqualRanksMergeLeftmostFirst) {
  TinyDir d("tok_leftmost", tiny_json("null"));  // no pre-tokenizer: the text is one word
  const auto tok = d.load();
  EXPECT_EQ(tok->encode("aaa", false), (Ids{20, 7}));
  EXPECT_EQ(tok->encode("aaaa", false), (Ids{20, 20}));
  EXPECT_EQ(tok->encode(std::string(100001, 'a'), false).size(), 50001u);  // long words stay fast
}

TEST(Tokenizer, MetaspaceSplitIsolatesEachReplacementRun) {
  // split: true cuts before every ▁ (MergedWithNext), so "▁▁" can never merge across words.
  TinyDir whole("tok_ms_whole", tiny_json(kMetaspaceWhole));
  TinyDir split("tok_ms_split", tiny_json(kMetaspaceSplit));
  EXPECT_EQ(whole.load()->encode("   ", false), (Ids{16, 6}));  // "▁▁" + "▁"
  EXPECT_EQ(split.load()->encode("   ", false), (Ids{6, 6, 6}));
  // prepend_scheme first: only the text's first piece gets the ▁; after an added token none.
  EXPECT_EQ(whole.load()->encode("a</s>a", false), (Ids{11, 2, 7}));
  EXPECT_EQ(split.load()->encode("a</s>a", false), (Ids{11, 2, 11}));
}

TEST(Tokenizer, DigitsSplitsUnicodeNumericCharacters) {
  const std::string individual = R"({"type": "Sequence", "pretokenizers": [)" + kMetaspaceWhole +
                                 R"(, {"type": "Digits", "individual_digits": true}]})";
  const std::string runs = R"({"type": "Sequence", "pretokenizers": [)" + kMetaspaceWhole +
                           R"(, {"type": "Digits", "individual_digits": false}]})";
  TinyDir none("tok_digits0", tiny_json(kMetaspaceWhole));
  TinyDir one("tok_digits1", tiny_json(individual));
  TinyDir many("tok_digits2", tiny_json(runs));
  EXPECT_EQ(one.load()->encode("12", false), (Ids{6, 13, 14}));
  EXPECT_EQ(many.load()->encode("12", false), (Ids{6, 15}));
  // Arabic-Indic ٣ is numeric (Rust's char::is_numeric), so "b٣" cannot merge across the split.
  EXPECT_EQ(none.load()->encode("ab٣", false), (Ids{11, 22}));
  EXPECT_EQ(many.load()->encode("ab٣", false), (Ids{12, 21}));
}

TEST(Tokenizer, AddedTokenOptions) {
  const std::string added = R"([{"id": 1, "content": "<s>", "special": true, "normalized": false},
    {"id": 23, "content": "[L]", "lstrip": true, "special": true, "normalized": false},
    {"id": 24, "content": "[R]", "rstrip": true, "special": false, "normalized": false},
    {"id": 25, "content": "cab", "single_word": true, "special": false, "normalized": false}])";
  TinyDir d("tok_added", tiny_json(kMetaspaceWhole, "null", added));
  const auto tok = d.load();
  EXPECT_EQ(tok->vocab_size(), 26);
  EXPECT_EQ(tok->encode("a  [L]", false), (Ids{11, 23}));      // lstrip takes the spaces before
  EXPECT_EQ(tok->encode("[R]  a", false), (Ids{24, 7}));       // rstrip those after; "a" then not first
  EXPECT_EQ(tok->encode("a cab", false), (Ids{11, 6, 25}));    // a word of its own: matched
  EXPECT_EQ(tok->encode("acab", false), (Ids{11, 9, 10}));     // inside a word: not matched
  EXPECT_EQ(tok->decode({23, 24}, true), "[R]");               // only special tokens are skipped
}

TEST(Tokenizer, NormalizersPrependReplaceLowercaseNfkc) {
  const std::string normalizer = R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
    {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"Regex": "\\s"}, "content": "▁"}]})";
  TinyDir d("tok_norm", tiny_json("null", normalizer));
  // NFKC turns Ａ into A, Lowercase A into a; \s matches the tab.
  EXPECT_EQ(d.load()->encode("Ａb\tA", false), (Ids{12, 11}));
}

TEST(Tokenizer, ConfigAddBosAddEosReplaceTheTemplate) {
  TinyDir d("tok_cfg", tiny_json(kMetaspaceWhole),
            R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "pad_token": "<unk>",
                "add_bos_token": false, "add_eos_token": true, "chat_template": "{{ messages }}",
                "clean_up_tokenization_spaces": true})");
  const auto tok = d.load();
  EXPECT_EQ(tok->encode("a"), (Ids{11, 2}));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_token(), "</s>");
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
}

TEST(Tokenizer, EncodeBatchEqualsEncodeOnManyThreads) {
  TinyDir d("tok_batch", tiny_json(kMetaspaceWhole));
  const auto tok = d.load();
  std::vector<std::string> texts;
  for (int i = 0; i < 500; ++i) {
    texts.push_back(std::string(static_cast<size_t>(i % 17), 'a') + " abc é\n" + std::to_string(i));
  }
  const auto batch = zt::encode_batch(*tok, texts, true, 4);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok->encode(texts[i])) << i;
  // An error on one text reaches the caller.
  texts[321] = "bad \xFF byte";
  EXPECT_EQ(message_of([&] { zt::encode_batch(*tok, texts, true, 3); }),
            d.dir.path + "/tokenizer.json: encode: the text is not valid UTF-8 (byte 4 of 10)");
}

TEST(Tokenizer, ByteTokenizer) {
  const auto tok = zt::byte_tokenizer();
  const std::string text("a\0\xFF\n", 4);
  EXPECT_EQ(tok->encode(text), (Ids{97, 0, 255, 10}));
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->bos_id(), std::nullopt);
  EXPECT_EQ(message_of([&] { tok->decode({256}); }),
            "byte tokenizer: decode: token id 256 is not in the vocabulary (256 ids)");
}

// A model whose merges show where the pre-tokenizer cut: "a-", "-a" and "--" form only inside a
// piece.
std::string dash_json(const std::string& pre_tokenizer, const std::string& decoder = "null") {
  return R"({"pre_tokenizer": )" + pre_tokenizer + R"(, "decoder": )" + decoder +
         R"(, "model": {"type": "BPE", "vocab": {"a": 0, "-": 1, "a-": 2, "-a": 3, "--": 4},
             "merges": ["a -", "- a", "- -"]}})";
}

std::string split_json(const std::string& pattern, const std::string& behavior, bool invert) {
  return R"({"type": "Split", "pattern": {"String": ")" + pattern + R"("}, "behavior": ")" + behavior +
         R"(", "invert": )" + (invert ? "true" : "false") + "}";
}

TEST(Tokenizer, SplitBehaviors) {
  const struct {
    std::string pattern, behavior;
    bool invert;
    Ids ids;  // of "a--a"
  } cases[] = {
      {"-", "Isolated", false, {0, 1, 1, 0}},           // a | - | - | a
      {"-", "Removed", false, {0, 0}},                  // a | a
      {"-", "MergedWithPrevious", false, {2, 1, 0}},    // a- | - | a
      {"-", "MergedWithNext", false, {0, 1, 3}},        // a | - | -a
      {"-", "Contiguous", false, {0, 4, 0}},            // a | -- | a
      {"a", "Isolated", true, {0, 4, 0}},               // the matches are the content: a | -- | a
      {"a", "Removed", true, {0, 0}},                   // ... and the rest goes
  };
  int n = 0;
  for (const auto& c : cases) {
    TinyDir d("tok_split" + std::to_string(n++), dash_json(split_json(c.pattern, c.behavior, c.invert)));
    EXPECT_EQ(d.load()->encode("a--a"), c.ids) << c.behavior << (c.invert ? " inverted" : "");
  }
  TinyDir whole("tok_split_none", dash_json("null"));
  EXPECT_EQ(whole.load()->encode("a--a"), (Ids{2, 3}));  // one piece: a- (rank 0), then -a (1)
}

TEST(Tokenizer, WhitespacePunctuationPreTokenizers) {
  TinyDir ws("tok_ws", dash_json(R"({"type": "WhitespaceSplit"})"));
  EXPECT_EQ(ws.load()->encode("a-\u2003 -a"), (Ids{2, 3}));  // em space and space both split
  TinyDir punct("tok_punct", dash_json(R"({"type": "Punctuation", "behavior": "MergedWithPrevious"})"));
  EXPECT_EQ(punct.load()->encode("a--a"), (Ids{2, 1, 0}));
}

TEST(Tokenizer, Decoders) {
  const auto decode_with = [](const std::string& name, const std::string& decoder, const std::string& vocab,
                              const Ids& ids) {
    TinyDir d(name,
              R"({"decoder": )" + decoder + R"(, "model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}})");
    return d.load()->decode(ids);
  };
  const std::string meta = R"({"▁▁": 0, "▁a": 1, "b": 2})";
  // Metaspace: ▁ becomes a space, except in the first token when a ▁ was prepended (all of them there).
  EXPECT_EQ(decode_with("tok_dec_ms", R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})", meta,
                        {0, 1, 2}),
            " ab");
  EXPECT_EQ(decode_with("tok_dec_ms2", R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"})", meta,
                        {0, 1, 2}),
            "   ab");
  EXPECT_EQ(decode_with("tok_dec_bpe", R"({"type": "BPEDecoder", "suffix": "</w>"})", R"({"a</w>": 0, "b</w>": 1})",
                        {0, 1, 0}),
            "a b a");
  // ByteLevel: one string of all bytes; an incomplete sequence becomes U+FFFD.
  EXPECT_EQ(decode_with("tok_dec_bl", R"({"type": "ByteLevel"})", R"({"Ġa": 0, "Ã": 1, "©": 2})", {0, 1, 2, 1}),
            " a\xC3\xA9\xEF\xBF\xBD");
  EXPECT_EQ(
      decode_with("tok_dec_re",
                  R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "_+"}, "content": "-"},
                            {"type": "Strip", "content": "-", "start": 2, "stop": 1}]})",
                  R"({"__a__": 0, "b_": 1})", {0, 1}),
      "ab");  // per token: "-a-" -> "a", "b-" -> "b"
  // No decoder: tokens joined by spaces.
  EXPECT_EQ(decode_with("tok_dec_none", "null", R"({"x": 0, "y": 1})", {0, 1}), "x y");
}

TEST(Tokenizer, BpeAffixes) {
  TinyDir prefix("tok_prefix", R"({"model": {"type": "BPE", "continuing_subword_prefix": "##",
      "vocab": {"a": 0, "##b": 1, "ab": 2}, "merges": ["a ##b"]}})");
  EXPECT_EQ(prefix.load()->encode("ab"), (Ids{2}));
  EXPECT_EQ(prefix.load()->encode("ba"), Ids{});  // "b" has no token and there is no unk token
  TinyDir suffix("tok_suffix", R"({"model": {"type": "BPE", "end_of_word_suffix": "</w>",
      "vocab": {"a": 0, "b</w>": 1, "ab</w>": 2}, "merges": ["a b</w>"]}})");
  EXPECT_EQ(suffix.load()->encode("ab"), (Ids{2}));
}

TEST(Tokenizer, PostProcessors) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"[CLS]": 0, "[SEP]": 1, "a": 2}, "merges": []})";
  TinyDir string_form("tok_tpl", R"({"post_processor": {"type": "TemplateProcessing", "single": "[CLS]:0 $A:0 [SEP]:0",
      "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [0], "tokens": ["[CLS]"]},
                         "[SEP]": {"id": "[SEP]", "ids": [1], "tokens": ["[SEP]"]}}}, )" + model + "}");
  EXPECT_EQ(string_form.load()->encode("a"), (Ids{0, 2, 1}));
  EXPECT_EQ(string_form.load()->encode("a", false), (Ids{2}));
  TinyDir roberta("tok_roberta", R"({"post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"},
      {"type": "RobertaProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 0]}]}, )" + model + "}");
  EXPECT_EQ(roberta.load()->encode("aa"), (Ids{0, 2, 2, 1}));
}

TEST(Tokenizer, ConfigChatTemplateListAndAddedTokensDecoder) {
  TinyDir d("tok_cfg2", tiny_json(kMetaspaceWhole),
            R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}],
                "added_tokens_decoder": {"30": {"content": "<|im_end|>", "special": true}},
                "eos_token": "<|im_end|>"})");
  const auto tok = d.load();
  EXPECT_EQ(tok->chat_template(), "D");
  EXPECT_EQ(tok->vocab_size(), 31);
  EXPECT_EQ(tok->eos_id(), 30);
  EXPECT_EQ(tok->encode("a<|im_end|>", false), (Ids{11, 30}));
  EXPECT_EQ(tok->decode({11, 30}, true), "a");
}

// ---- bad input: one exact message each ----

TEST(TokenizerErrors, UnknownModelType) {
  zeroshard::test::RankDir dir("tok_err_model");
  const std::string path = dir.path + "/tokenizer.json";
  write(path, R"({"model": {"type": "WordPiece", "vocab": {}}})");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(path); }),
            path + ": model.type 'WordPiece' is not supported (supported: BPE)");
  write(path, R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "BertNormalizer"}]},
                  "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(dir.path); }),
            path + ": normalizer.normalizers[0].type 'BertNormalizer' is not supported (supported: Sequence, Prepend, "
                   "Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents)");
}

TEST(TokenizerErrors, MalformedJsonNamesFileAndPosition) {
  zeroshard::test::RankDir dir("tok_err_json");
  const std::string path = dir.path + "/tokenizer.json";
  write(path, "{\"model\": {\"type\": \"BPE\",\n  \"vocab\": {\"a\": 0,}\n}}");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(path); }),
            path + ": malformed JSON at line 2, column 20: syntax error while parsing object key - unexpected '}'; "
                   "expected string literal");
}

// A number no double holds (found by fuzz_tokenizer): a ConfigError naming the file.
TEST(TokenizerErrors, NumberOverflowNamesTheFile) {
  zeroshard::test::RankDir dir("tok_err_overflow");
  const std::string path = dir.path + "/tokenizer.json";
  write(path, "{\"model\": {\"type\": \"BPE\", \"dropout\": 1.02E1102}}");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(path); }),
            path + ": malformed JSON: number overflow parsing '1.02E1102'");
}

// Ids index the model's tables: an id far beyond any real vocabulary (found by fuzz_tokenizer: a
// 9 GB allocation) is refused, naming the token, before anything is allocated.
TEST(TokenizerErrors, TokenIdBeyondAnyVocabularyIsRefused) {
  zeroshard::test::RankDir dir("tok_err_big_id");
  const std::string path = dir.path + "/tokenizer.json";
  write(path, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 283762763}, "merges": []}})");
  const std::string err = message_of([&] { zt::load_tokenizer(path); });
  EXPECT_NE(err.find("token 'b' has id 283762763, expected an integer in [0, 2^24)"), std::string::npos) << err;
  write(path, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                  "added_tokens": [{"id": 40000000, "content": "<x>", "special": true}]})");
  const std::string added = message_of([&] { zt::load_tokenizer(path); });
  EXPECT_NE(added.find("expected an id in [0, 2^24), got 40000000"), std::string::npos) << added;
}

TEST(TokenizerErrors, MergeNamesTokenOutsideTheVocabulary) {
  zeroshard::test::RankDir dir("tok_err_merge");
  const std::string path = dir.path + "/tokenizer.json";
  write(path, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "ab q"]}})");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(path); }),
            path + ": model.merges[1] ('ab' + 'q') names 'q', which is not in model.vocab");
  write(path, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}})");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(path); }),
            path + ": model.merges[0] ('a' + 'b') names 'ab', which is not in model.vocab");
}

TEST(TokenizerErrors, DecodeIdOutsideTheVocabulary) {
  TinyDir d("tok_err_decode", tiny_json(kMetaspaceWhole));
  const auto tok = d.load();
  const std::string path = d.dir.path + "/tokenizer.json";
  EXPECT_EQ(message_of([&] { tok->decode({7, 23}); }),
            path + ": decode: token id 23 (position 1) is not in the vocabulary (23 ids)");
  EXPECT_EQ(message_of([&] { tok->decode({-1}); }),
            path + ": decode: token id -1 (position 0) is not in the vocabulary (23 ids)");
  EXPECT_EQ(message_of([&] { tok->id_to_token(99); }), path + ": token id 99 is not in the vocabulary (23 ids)");
}

TEST(TokenizerErrors, OtherBadFiles) {
  zeroshard::test::RankDir dir("tok_err_other");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(dir.path); }),
            dir.path + ": no tokenizer.json or tokenizer.model in this directory");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(dir.path + "/nothing"); }),
            dir.path + "/nothing: cannot load a tokenizer: No such file or directory (errno 2)");
  const std::string json = dir.path + "/tokenizer.json";
  write(json, R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"},
                  "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(json); }),
            json + ": pre_tokenizer.pattern.Regex: regex '(a' does not compile at offset 2 (of the PCRE2 form '(a'): "
                   "missing closing parenthesis");
  write(json, R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {"a": 0}, "merges": []}})");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(json); }),
            json + ": model.dropout: BPE dropout (random merges) is not supported; set it to null");
  const std::string ranks = dir.path + "/ranks.tiktoken";
  write(ranks, "YQ== 0\nYg== 1\n");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(ranks); }),
            ranks + ": a tiktoken rank file of 2 tokens is none of the encodings whose split pattern and special "
                    "tokens are known (gpt2 (r50k_base) 50256, p50k_base 50280, cl100k_base 100256, o200k_base "
                    "199998, Llama 3 128000 tokens); use the model's tokenizer.json");
  write(ranks, "YQ== 0\nnot base64! 1\n");
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(ranks); }),
            ranks + ": line 2: expected 'BASE64 RANK', got 'not base64! 1'");
}

TEST(TokenizerErrors, NotASentencePieceModel) {
  zeroshard::test::RankDir dir("tok_err_spm");
  const std::string model = dir.path + "/tokenizer.model";
  write(model, "\x01\x02 not a protobuf");
  if (ZS_TEST_ASAN) {  // the module cannot be loaded there: a clear refusal, not the sanitizer ending the process
    EXPECT_EQ(message_of([&] { zt::load_tokenizer(model); }),
              model + ": SentencePiece support (libzs_text_sentencepiece.so) is not available in a build with "
                      "AddressSanitizer: the module must be loaded with RTLD_DEEPBIND, which the sanitizer's runtime "
                      "refuses");
    return;
  }
  EXPECT_EQ(message_of([&] { zt::load_tokenizer(model); }).rfind(model + ": not a SentencePiece model: ", 0), 0u);
}
