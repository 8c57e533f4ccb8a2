// SPDX-License-Identifier: Apache-2.0
// JSONL records: the three shapes, their tokens and loss targets (with the data tests' byte
// tokenizer and chat format), where the assistant turns of a rendered conversation lie, and the
// exact error for each malformed line.

#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "data/test_tokenizer.h"
#include "zeroshard/data/encode.h"
#include "zeroshard/data/jsonl.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;
using zs::test::message_of;
using zs::test::ByteTestTokenizer;

namespace {

std::string parse_error(const std::string& line) {
  return message_of([&] { zd::parse_record(line); });
}

std::vector<int32_t> bytes_of(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

template <typename T>
std::vector<T> cat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(Jsonl, ParsesTheThreeShapes) {
  zd::Record r = zd::parse_record(R"({"text": "caf\u00e9", "id": 7})");
  EXPECT_EQ(r.kind, zd::RecordKind::kText);
  EXPECT_EQ(r.text, "caf\xc3\xa9");
  r = zd::parse_record(R"({"prompt": "Q: 2+2?", "completion": " 4", "source": "x"})");
  EXPECT_EQ(r.kind, zd::RecordKind::kPromptCompletion);
  EXPECT_EQ(r.prompt, "Q: 2+2?");
  EXPECT_EQ(r.completion, " 4");
  r = zd::parse_record(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})");
  EXPECT_EQ(r.kind, zd::RecordKind::kMessages);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "Hello");
  EXPECT_TRUE(zd::is_blank(" \t\r"));
  EXPECT_FALSE(zd::is_blank(" {}"));
}

// Each malformed line: what is wrong, exactly.
TEST(Jsonl, SaysWhatIsWrongWithAMalformedLine) {
  EXPECT_EQ(parse_error(R"({"text": "a",})"),
            "bad JSON at column 14: syntax error while parsing object key - unexpected '}'; expected string literal");
  EXPECT_EQ(parse_error(R"({"text": "abc)"),
            "bad JSON at column 14: syntax error while parsing value - invalid string: missing closing quote; last "
            "read: '\"abc'");
  EXPECT_EQ(parse_error(R"(["text"])"), "expected a JSON object, got an array");
  // A number no double holds (found by fuzz_records): refused, not an exception of the JSON library.
  EXPECT_EQ(parse_error(R"({"text": "a", "n": 1e999})"), "bad JSON: number overflow parsing '1e999'");
  EXPECT_EQ(parse_error(R"({"txt": "a", "id": 1})"),
            "a record needs \"text\", \"prompt\" and \"completion\", or \"messages\"; this one has \"id\", \"txt\"");
  EXPECT_EQ(parse_error(R"({"text": "a", "messages": []})"),
            "a record has one of \"text\", \"prompt\"/\"completion\" or \"messages\"; this one has \"messages\", "
            "\"text\"");
  EXPECT_EQ(parse_error(R"({"text": 12})"), "\"text\" must be a string, got a number");
  EXPECT_EQ(parse_error(R"({"prompt": "q"})"), "a record with \"prompt\" needs \"completion\" too");
  EXPECT_EQ(parse_error(R"({"prompt": "q", "completion": null})"), "\"completion\" must be a string, got null");
  EXPECT_EQ(parse_error(R"({"messages": {"role": "user"}})"), "\"messages\" must be an array, got an object");
  EXPECT_EQ(parse_error(R"({"messages": []})"), "\"messages\" is empty");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "a"}, "hi"]})"),
            "messages[1] must be an object, got a string");
  EXPECT_EQ(parse_error(R"({"messages": [{"content": "a"}]})"), "messages[0] has no \"role\"");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": ["a"]}]})"),
            "messages[0].content must be a string, got an array");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "a"}, {"role": "gpt", "content": "b"}]})"),
            "messages[1] has the unknown role \"gpt\" (roles: system, user, assistant, tool)");
}

// Reading a file names file:line; blank lines count as lines and are skipped.
TEST(Jsonl, NamesFileAndLine) {
  zs::test::RankDir dir("data_jsonl_lines");
  const std::string path = dir.path + "/d.jsonl";
  zs::test::write_bytes(path, "{\"text\": \"a\"}\n\n  \n{\"text\": \"b\"}\n{\"text\": \"c\"\n{\"text\": \"d\"}\n");
  std::vector<std::pair<std::string, int64_t>> seen;
  const std::string msg = message_of([&] {
    zd::for_each_record(path, [&](const zd::Record& r, int64_t line) { seen.emplace_back(r.text, line); });
  });
  EXPECT_EQ(msg, path + ":5: bad JSON at column 13: syntax error while parsing object - unexpected end of input; "
                        "expected '}'");
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, int64_t>>{{"a", 1}, {"b", 4}}));
}

TEST(Jsonl, EncodesTextAndPromptCompletion) {
  const ByteTestTokenizer tok;
  const zd::RecordEncoder enc(tok, {}, {tok.eos_id()});
  zd::Document d = enc.encode(zd::parse_record(R"({"text": "ab"})"));
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{256, 'a', 'b', 257}));
  EXPECT_EQ(d.trained, (std::vector<uint8_t>{1, 1, 1, 1}));
  d = enc.encode(zd::parse_record(R"({"prompt": "Q?", "completion": "A"})"));
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{256, 'Q', '?', 'A', 257}));
  EXPECT_EQ(d.trained, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  // A document that already ends with EOS gets no second one; no eos_id: nothing appended.
  d = enc.encode(zd::parse_record(R"({"text": "x</s>"})"));
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{256, 'x', 257}));
  const zd::RecordEncoder plain(tok, {}, {});
  EXPECT_EQ(plain.encode(zd::parse_record(R"({"prompt": "", "completion": "A"})")).tokens,
            (std::vector<int32_t>{256, 'A'}));
  EXPECT_EQ(message_of([&] { enc.encode(zd::parse_record(R"({"messages": [{"role": "user", "content": "a"}]})")); }),
            "a \"messages\" record needs a chat template, and the tokenizer has none");
}

// A token the tokenizer knows but the model has no embedding row for is refused with its id and text.
TEST(Jsonl, RefusesATokenOutsideTheModelsVocabulary) {
  const ByteTestTokenizer tok;
  zd::EncodeOptions o;
  o.eos_id = tok.eos_id();
  o.model_vocab_size = 257;  // BOS (256) fits, EOS (257) does not
  const zd::RecordEncoder enc(tok, {}, o);
  EXPECT_EQ(message_of([&] { enc.encode(zd::parse_record(R"({"text": "ab"})")); }),
            "token id 257 (</s>) is outside the model's vocabulary of 257 ids");
  o.model_vocab_size = 258;
  EXPECT_EQ(zd::RecordEncoder(tok, {}, o).encode(zd::parse_record(R"({"text": "ab"})")).tokens,
            (std::vector<int32_t>{256, 'a', 'b', 257}));
}

// The assistant turns of a rendered conversation (content and end-of-turn text) are trained,
// nothing else.
TEST(Jsonl, TrainsOnAssistantTurnsOnly) {
  const std::vector<zs::text::ChatMessage> messages = {
      {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}, {"assistant", "A2"}};
  const zd::RenderedChat chat = zd::render_chat(messages, zs::test::render_test_chat);
  const std::string text =
      "<s><|system|>\nS\n<|user|>\nU1\n<|assistant|>\nA1</s>\n<|user|>\nU2\n<|assistant|>\nA2</s>\n";
  ASSERT_EQ(chat.text, text);
  ASSERT_EQ(chat.assistant.size(), 2u);
  EXPECT_EQ(text.substr(chat.assistant[0].begin, chat.assistant[0].end - chat.assistant[0].begin), "A1</s>\n");
  EXPECT_EQ(text.substr(chat.assistant[1].begin, chat.assistant[1].end - chat.assistant[1].begin), "A2</s>\n");

  const ByteTestTokenizer tok;
  const zd::RecordEncoder enc(tok, zs::test::test_chat_spans, {tok.eos_id()});
  zd::Record r;
  r.kind = zd::RecordKind::kMessages;
  r.messages = messages;
  const zd::Document d = enc.encode(r);
  const std::vector<int32_t> head = cat({256}, bytes_of("<|system|>\nS\n<|user|>\nU1\n<|assistant|>\n"));
  const std::vector<int32_t> a1 = cat(bytes_of("A1"), cat({257}, bytes_of("\n")));
  const std::vector<int32_t> mid = bytes_of("<|user|>\nU2\n<|assistant|>\n");
  const std::vector<int32_t> a2 = cat(bytes_of("A2"), cat({257}, bytes_of("\n")));
  EXPECT_EQ(d.tokens, cat(cat(cat(cat(head, a1), mid), a2), {257}));
  std::vector<uint8_t> want = cat(cat(cat(std::vector<uint8_t>(head.size(), 0), std::vector<uint8_t>(a1.size(), 1)),
                                      std::vector<uint8_t>(mid.size(), 0)),
                                  std::vector<uint8_t>(a2.size(), 1));
  want.push_back(1);  // the appended EOS follows a trained token
  EXPECT_EQ(d.trained, want);
  EXPECT_EQ(tok.decode(d.tokens), text + "</s>");
}

// A template that rewrites an earlier turn once a later one exists cannot place the turns.
TEST(Jsonl, RefusesATemplateThatRewritesEarlierTurns) {
  const auto forgetful = [](const std::vector<zs::text::ChatMessage>& m, bool gen) {
    std::string out;
    for (size_t i = 0; i < m.size(); ++i) {
      // Earlier assistant turns are shortened to "..." once another message follows.
      const bool last = i + 1 == m.size();
      out += m[i].role + ":" + (m[i].role == "assistant" && !last ? std::string("...") : m[i].content) + "\n";
    }
    return gen ? out + "assistant:" : out;
  };
  EXPECT_EQ(message_of([&] {
              zd::render_chat({{"user", "a"}, {"assistant", "b"}, {"user", "c"}, {"assistant", "d"}}, forgetful);
            }),
            "the chat template's rendering of messages [0, 1] is not the start of its rendering of the whole "
            "conversation (the template rewrites earlier turns when later ones follow): the assistant turn of "
            "message 1 cannot be located");
  const auto no_newline = [](const std::vector<zs::text::ChatMessage>& m, bool gen) {
    std::string out;
    for (const auto& x : m) out += x.role + ":" + x.content + ";";
    return gen ? out + "assistant>" : out;
  };
  EXPECT_EQ(message_of([&] { zd::render_chat({{"user", "a"}, {"assistant", "b"}}, no_newline); }),
            "the chat template's rendering of messages [0, 1) with the generation prompt is not the start of its "
            "rendering of messages [0, 1]: the assistant turn of message 1 cannot be located");
}
