// SPDX-License-Identifier: Apache-2.0
// zeroshard's chat templates against the two reference implementations, byte for byte:
// @huggingface/jinja 0.5.11 (Node) and Python's Jinja2 configured as transformers configures it.
//  - the chat templates of the Llama 2/3/3.1, Mistral v0.1/v0.3, Qwen2/2.5, Phi-3 and Zephyr families
//    (tests/text/templates: written for these tests with each family's constructs, as no
//    installed package ships the originals) over the conversations of conversations.json, with
//    and without a generation prompt;
//  - one template per construct the engine supports (jinja_constructs.json);
//  - the assistant spans of render_for_training against spans computed from the references'
//    own renders of the same prefixes.
// Where @huggingface/jinja departs from Jinja2 (booleans written "true", no select filter, ...),
// the case says so and is compared with Jinja2 alone; what transformers renders is the target.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <thread>

#include "jinja/json_value.h"
#include "jinja/template.h"
#include "jinja/unicode.h"
#include "text/reference_renders.h"
#include "zeroshard/text/chat_template.h"

namespace {

namespace zt = zeroshard::text;
using zeroshard::test::Json;
using zeroshard::test::RenderCase;

struct Family {
  const char* name;
  const char* bos;
  const char* eos;
  const char* assistant_header;  // what precedes an assistant message's span
  const char* turn_end;          // how an assistant message's span ends
  const char* closing = "";      // what the last span has after turn_end (an EOS closing the conversation)
};

const Family kFamilies[] = {
    {"llama2", "<s>", "</s>", "[/INST]", " </s>"},
    {"llama3", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
    {"llama3_1", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
    {"mistral_v1", "<s>", "</s>", "[/INST]", "</s>"},
    {"mistral_v3", "<s>", "</s>", "[/INST]", "</s>"},
    {"phi3", "<s>", "<|endoftext|>", "<|assistant|>\n", "<|end|>\n", "<|endoftext|>"},
    {"qwen2", "", "<|im_end|>", "<|im_start|>assistant\n", "<|im_end|>\n"},
    {"qwen2_5", "", "<|im_end|>", "<|im_start|>assistant\n", "<|im_end|>\n"},
    {"zephyr", "<s>", "</s>", "<|assistant|>\n", "</s>\n"},
};

// Template and conversation pairs @huggingface/jinja renders differently from Jinja2, and why.
const std::map<std::string, std::string> kJsDivergences = {
    {"llama2/empty_system", "@huggingface/jinja's != is JavaScript's loose one: '' != false is false there, "
                            "so the empty system text is dropped"},
};

const Json kNow = Json::array({2024, 7, 26, 10, 0, 0});

std::optional<std::tm> tm_from(const Json& now) {
  if (now.is_null()) return std::nullopt;
  std::tm t{};
  t.tm_year = now[0].get<int>() - 1900;
  t.tm_mon = now[1].get<int>() - 1;
  t.tm_mday = now[2].get<int>();
  t.tm_hour = now[3].get<int>();
  t.tm_min = now[4].get<int>();
  t.tm_sec = now[5].get<int>();
  const std::time_t seconds = timegm(&t);  // fills in the weekday and day of the year
  gmtime_r(&seconds, &t);
  return t;
}

struct Conversation {
  std::string name;
  Json json;        // {"messages": [...], other variables...}
  Json templates;   // the families it is meant for (null: all)
  std::string python_only;
};

std::vector<Conversation> load_conversations() {
  std::vector<Conversation> out;
  const Json all = Json::parse(zeroshard::test::read_text_file(
      zeroshard::test::source_path("tests/text/conversations.json")));
  for (const Json& c : all["conversations"]) {
    Conversation conv{c["name"], Json::object(), c.value("templates", Json()), c.value("python_only", "")};
    for (const auto& [key, value] : c.items()) {
      if (key != "name" && key != "templates" && key != "python_only") conv.json[key] = value;
    }
    out.push_back(std::move(conv));
  }
  return out;
}

bool applies(const Conversation& c, const Family& f) {
  return c.templates.is_null() || std::find(c.templates.begin(), c.templates.end(), f.name) != c.templates.end();
}

std::string family_source(const Family& f) {
  return zeroshard::test::read_text_file(zeroshard::test::source_path(std::string("tests/text/templates/") + f.name + ".jinja"));
}

zt::RenderOptions options_for(const Family& f, bool add_generation_prompt) {
  zt::RenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.variables = {{"bos_token", f.bos}, {"eos_token", f.eos}};
  o.now = tm_from(kNow);
  return o;
}

// The variables transformers gives a chat template for `messages` of the conversation.
Json reference_context(const Family& f, const Conversation& c, const Json& messages, bool add_generation_prompt) {
  Json ctx = {{"messages", messages}, {"add_generation_prompt", add_generation_prompt},
              {"bos_token", f.bos}, {"eos_token", f.eos}, {"tools", nullptr}, {"documents", nullptr}};
  for (const auto& [key, value] : c.json.items()) {
    if (key != "messages") ctx[key] = value;
  }
  return ctx;
}

Json prefix(const Json& messages, size_t n) {
  return Json(messages.begin(), messages.begin() + static_cast<long>(n));
}

std::string family_case(const Family& f, const Conversation& c, bool agp) {
  return std::string(f.name) + "/" + c.name + "/" + (agp ? "generation_prompt" : "plain");
}
std::string span_case(const Family& f, const Conversation& c, size_t i, const char* part) {
  return std::string("span:") + f.name + "/" + c.name + "/" + std::to_string(i) + "/" + part;
}

struct Suite {
  std::vector<Conversation> conversations;
  Json constructs;
  zeroshard::test::ReferenceRenders refs;
};

// Every case of this file, rendered once by both references.
const Suite& suite() {
  static const Suite s = [] {
    Suite s;
    s.conversations = load_conversations();
    s.constructs = Json::parse(zeroshard::test::read_text_file(
        zeroshard::test::source_path("tests/text/jinja_constructs.json")))["cases"];
    std::vector<RenderCase> cases;
    for (const Family& f : kFamilies) {
      const std::string source = family_source(f);
      for (const Conversation& c : s.conversations) {
        if (!applies(c, f)) continue;
        const Json& messages = c.json["messages"];
        for (bool agp : {false, true}) {
          cases.push_back({family_case(f, c, agp), source, reference_context(f, c, messages, agp), kNow});
        }
        for (size_t i = 0; i < messages.size(); ++i) {
          if (messages[i]["role"] != "assistant") continue;
          cases.push_back({span_case(f, c, i, "head"), source, reference_context(f, c, prefix(messages, i), true), kNow});
          cases.push_back({span_case(f, c, i, "through"), source, reference_context(f, c, prefix(messages, i + 1), false), kNow});
        }
      }
    }
    for (const Json& c : s.constructs) {
      cases.push_back({"construct:" + c["name"].get<std::string>(), c["template"], c["context"], c.value("now", Json())});
    }
    s.refs = zeroshard::test::render_with_references(cases);
    return s;
  }();
  return s;
}

#define REQUIRE_REFERENCES() \
  ASSERT_EQ(suite().refs.problem, "") << "the reference renderers could not run"

struct Outcome {
  bool ok = false;
  std::string text;
  std::string error;
  bool raised = false;  // the template called raise_exception
};

template <typename Render>
Outcome outcome_of(Render render) {
  Outcome o;
  try {
    o.text = render();
    o.ok = true;
  } catch (const zt::ChatTemplateError& e) {
    o.error = e.message();
    o.raised = true;
  } catch (const zeroshard::Error& e) {
    o.error = e.message();
  }
  return o;
}

std::string excerpt(const std::string& s, size_t at) {
  const size_t from = at > 30 ? at - 30 : 0;
  return Json(s.substr(from, 60)).dump();  // JSON-escaped (may cut a UTF-8 character: "\ufffd")
}

void expect_same(const std::string& name, const Outcome& ours, const Json& ref, const char* who) {
  SCOPED_TRACE(name + " against " + who);
  if (ref.contains("output")) {
    const std::string expected = ref["output"];
    if (!ours.ok) {
      ADD_FAILURE() << who << " renders " << Json(expected).dump() << ", zeroshard fails: " << ours.error;
      return;
    }
    if (ours.text == expected) return;
    const size_t at = static_cast<size_t>(
        std::mismatch(expected.begin(), expected.end(), ours.text.begin(), ours.text.end()).first - expected.begin());
    ADD_FAILURE() << "first difference at byte " << at << ": " << who << " " << excerpt(expected, at)
                  << ", zeroshard " << excerpt(ours.text, at);
    return;
  }
  const std::string error = ref["error"];
  if (ours.ok) {
    ADD_FAILURE() << who << " fails (" << error << "), zeroshard renders " << Json(ours.text).dump();
    return;
  }
  const std::string marker = "the template raised an error: ";
  const bool ref_raised = error.rfind("TemplateError: ", 0) == 0;  // Jinja2's raise_exception
  EXPECT_TRUE(!ref_raised || ours.raised) << who << ": " << error << "; zeroshard: " << ours.error;
  if (ours.raised) {
    const std::string message = ours.error.substr(ours.error.find(marker) + marker.size());
    EXPECT_TRUE(error.size() >= message.size() && error.compare(error.size() - message.size(), message.size(), message) == 0)
        << who << " failed with " << error << "; zeroshard raised " << ours.error;
  }
}

TEST(ChatTemplateReference, FamilyTemplatesRenderAsTheReferencesDo) {
  REQUIRE_REFERENCES();
  int compared_js = 0, compared_python = 0;
  for (const Family& f : kFamilies) {
    const zt::ChatTemplate tmpl(family_source(f), std::string(f.name) + ".jinja");
    for (const Conversation& c : suite().conversations) {
      if (!applies(c, f)) continue;
      for (bool agp : {false, true}) {
        const std::string name = family_case(f, c, agp);
        const Outcome ours = outcome_of([&] { return tmpl.render_json(c.json.dump(), options_for(f, agp)); });
        expect_same(name, ours, suite().refs.python.at(name), "Jinja2");
        ++compared_python;
        const std::string pair = std::string(f.name) + "/" + c.name;
        if (c.python_only.empty() && kJsDivergences.count(pair) == 0) {
          expect_same(name, ours, suite().refs.js.at(name), "@huggingface/jinja");
          ++compared_js;
        }
      }
    }
  }
  std::printf("family renders compared: %d with Jinja2, %d with @huggingface/jinja\n", compared_python, compared_js);
  EXPECT_GE(compared_js, 120);  // the pairs left to Jinja2 alone stay few
}

TEST(ChatTemplateReference, EachConstructRendersAsTheReferencesDo) {
  REQUIRE_REFERENCES();
  int compared_js = 0, compared_python = 0;
  for (const Json& c : suite().constructs) {
    const std::string name = "construct:" + c["name"].get<std::string>();
    const Outcome ours = outcome_of([&] {
      const zt::jinja::Template tmpl(c["template"].get<std::string>(), c["name"].get<std::string>());
      const zt::jinja::Value context = zt::jinja::value_from_json(c["context"].dump(), "context");
      return tmpl.render(context.as_dict(), tm_from(c.value("now", Json())));
    });
    expect_same(name, ours, suite().refs.python.at(name), "Jinja2");
    ++compared_python;
    if (!c.contains("python_only")) {
      expect_same(name, ours, suite().refs.js.at(name), "@huggingface/jinja");
      ++compared_js;
    }
  }
  std::printf("construct templates compared: %d with Jinja2, %d with @huggingface/jinja\n", compared_python,
              compared_js);
}

// The spans the prefix method finds in a reference's renders, or nullopt where that reference's
// renders are not prefixes of each other (or fail): then zeroshard must refuse too.
std::optional<std::vector<zt::AssistantSpan>> reference_spans(const Json& refs, const Family& f, const Conversation& c) {
  const Json& full = refs.at(family_case(f, c, false));
  if (!full.contains("output")) return std::nullopt;
  const std::string text = full["output"];
  std::vector<zt::AssistantSpan> spans;
  const Json& messages = c.json["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const Json& head = refs.at(span_case(f, c, i, "head"));
    const Json& through = refs.at(span_case(f, c, i, "through"));
    if (!head.contains("output") || !through.contains("output")) return std::nullopt;
    const std::string h = head["output"], t = through["output"];
    if (t.compare(0, h.size(), h) != 0) return std::nullopt;
    size_t end = t.size();
    const std::string eos = f.eos;
    const auto ends_with = [](const std::string& s, const std::string& x) {
      return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (text.compare(0, t.size(), t) != 0 && ends_with(t, eos) && ends_with(text, eos) &&
        t.size() - eos.size() > h.size()) {
      end = t.size() - eos.size();  // the EOS that closes a conversation without a generation prompt
    }
    if (text.compare(0, end, t, 0, end) != 0) return std::nullopt;
    spans.push_back({i, h.size(), end});
  }
  return spans;
}

TEST(ChatTemplateReference, AssistantSpansMatchThoseOfTheReferenceRenders) {
  REQUIRE_REFERENCES();
  int with_spans = 0, refused = 0;
  for (const Family& f : kFamilies) {
    const zt::ChatTemplate tmpl(family_source(f), std::string(f.name) + ".jinja");
    for (const Conversation& c : suite().conversations) {
      if (!applies(c, f)) continue;
      SCOPED_TRACE(std::string(f.name) + "/" + c.name);
      std::optional<zt::TrainingText> ours;
      std::string error;
      try {
        ours = tmpl.render_json_for_training(c.json.dump(), options_for(f, false));
      } catch (const zeroshard::Error& e) {
        error = e.message();
      }
      const std::string pair = std::string(f.name) + "/" + c.name;
      const bool compare_js = c.python_only.empty() && kJsDivergences.count(pair) == 0;
      for (const Json* refs : {&suite().refs.python, compare_js ? &suite().refs.js : nullptr}) {
        if (refs == nullptr) continue;
        const auto expected = reference_spans(*refs, f, c);
        if (!expected) {
          EXPECT_FALSE(ours.has_value()) << "the reference's prefix renders do not nest, zeroshard found spans";
          continue;
        }
        ASSERT_TRUE(ours.has_value()) << error;
        EXPECT_EQ(ours->text, (*refs)[family_case(f, c, false)]["output"].get<std::string>());
        ASSERT_EQ(ours->assistant.size(), expected->size());
        for (size_t k = 0; k < expected->size(); ++k) {
          EXPECT_EQ(ours->assistant[k].message, (*expected)[k].message);
          EXPECT_EQ(ours->assistant[k].begin, (*expected)[k].begin);
          EXPECT_EQ(ours->assistant[k].end, (*expected)[k].end);
        }
      }
      (ours ? with_spans : refused) += 1;
    }
  }
  std::printf("conversations with assistant spans: %d; refused (prefixes do not nest, or the template raised): %d\n",
              with_spans, refused);
  EXPECT_GE(with_spans, 50);
}

// What the spans hold, family by family: the assistant's words, ending with the turn's end
// marker, right after the assistant header.
TEST(ChatTemplateSpans, EachFamilySpanHoldsTheMessageAndItsTurnEnd) {
  const std::string conversation = R"({"messages": [
      {"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "1, 2, 3."},
      {"role": "user", "content": "Now backwards."}, {"role": "assistant", "content": "3, 2, 1."}]})";
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    const zt::ChatTemplate tmpl(family_source(f), std::string(f.name) + ".jinja");
    const zt::TrainingText t = tmpl.render_json_for_training(conversation, options_for(f, false));
    ASSERT_EQ(t.assistant.size(), 2u);
    const char* contents[] = {"1, 2, 3.", "3, 2, 1."};
    for (size_t k = 0; k < 2; ++k) {
      const zt::AssistantSpan& s = t.assistant[k];
      EXPECT_EQ(s.message, 2 * k + 1);
      const std::string span = t.text.substr(s.begin, s.end - s.begin);
      const std::string before = t.text.substr(0, s.begin);
      EXPECT_NE(span.find(contents[k]), std::string::npos) << Json(span).dump();
      const std::string ending = std::string(f.turn_end) + (k == 1 ? f.closing : "");
      EXPECT_EQ(span.substr(span.size() - ending.size()), ending) << Json(span).dump();
      EXPECT_EQ(before.substr(before.size() - std::string(f.assistant_header).size()), f.assistant_header);
      // Only the content and the end marker: nothing of the next turn.
      EXPECT_EQ(span.find("Now backwards"), std::string::npos);
    }
    EXPECT_EQ(t.text, tmpl.render_json(conversation, options_for(f, false)));
  }
}

TEST(ChatTemplateSpans, MarkedSpansShowWhatIsTrained) {
  const Family& qwen = kFamilies[6];
  ASSERT_EQ(std::string(qwen.name), "qwen2");
  const zt::ChatTemplate tmpl(family_source(qwen), "qwen2.jinja");
  const zt::TrainingText t = tmpl.render_for_training(
      {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}, {"assistant", "Bye."}}, options_for(qwen, false));
  EXPECT_EQ(zt::mark_assistant_spans(t),
            "<|im_start|>system\nYou are a careful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<<<Hello!<|im_end|>\n>>><|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n<<<Bye.<|im_end|>\n>>>");
  EXPECT_EQ(zt::mark_assistant_spans(t, "[", "]").size(), t.text.size() + 4);
}

TEST(ChatTemplateSpans, ToolCallTurnsAreSpansToo) {
  for (const char* name : {"llama3_1", "qwen2_5"}) {
    SCOPED_TRACE(name);
    const Family& f = *std::find_if(std::begin(kFamilies), std::end(kFamilies),
                                    [&](const Family& x) { return std::string(x.name) == name; });
    const zt::ChatTemplate tmpl(family_source(f), std::string(name) + ".jinja");
    const auto conv = std::find_if(suite().conversations.begin(), suite().conversations.end(),
                                   [](const Conversation& c) { return c.name == "tool_use"; });
    const zt::TrainingText t = tmpl.render_json_for_training(conv->json.dump(), options_for(f, false));
    ASSERT_EQ(t.assistant.size(), 2u);
    EXPECT_EQ(t.assistant[0].message, 2u);
    const std::string call = t.text.substr(t.assistant[0].begin, t.assistant[0].end - t.assistant[0].begin);
    EXPECT_NE(call.find("\"get_weather\""), std::string::npos) << call;
    EXPECT_NE(call.find("\"Paris\""), std::string::npos) << call;
    EXPECT_EQ(call.substr(call.size() - std::string(f.turn_end).size()), f.turn_end) << call;
    const std::string answer = t.text.substr(t.assistant[1].begin, t.assistant[1].end - t.assistant[1].begin);
    EXPECT_EQ(answer, std::string("It is 21 °C and clear in Paris.") + f.turn_end);
  }
}

// One ChatTemplate renders from several threads at once, each render as it is alone.
TEST(ChatTemplateThreads, ConcurrentRendersMatchSerialOnes) {
  const Family& f = kFamilies[2];  // llama3_1: sets, tojson, strftime_now, tools
  const zt::ChatTemplate tmpl(family_source(f), "llama3_1.jinja");
  std::vector<std::string> conversations, expected;
  for (const Conversation& c : suite().conversations) {
    if (!applies(c, f) || c.name == "roles_out_of_order") continue;
    conversations.push_back(c.json.dump());
    expected.push_back(tmpl.render_json(conversations.back(), options_for(f, true)));
  }
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t k = 0; k < conversations.size(); ++k) {
          if (tmpl.render_json(conversations[k], options_for(f, true)) != expected[k]) {
            failures[t] = "conversation " + std::to_string(k) + " in round " + std::to_string(round);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& failure : failures) EXPECT_EQ(failure, "");
}

// The engine's Unicode operations against CPython's for every code point both know.
TEST(ChatTemplateUnicode, CaseMappingAndCharacterClassesMatchPython) {
  namespace uc = zt::jinja::unicode;
  const std::string out = zeroshard::test::scratch_dir() + "/unicode.json";
  const std::string problem = zeroshard::test::run_command(
      "/usr/bin/python3 " + zeroshard::test::source_path("tests/text/unicode_reference.py") + " " + out);
  ASSERT_EQ(problem, "");
  const Json ref = Json::parse(zeroshard::test::read_text_file(out));
  const std::u32string chars = uc::decode(ref["chars"].get<std::string>());
  // Unicode 15.0 made these modifier letters lowercase (cased); CPython 3.11 has Unicode 14.0.
  const std::u32string version_changes = {0x10FC, 0xA7F2, 0xA7F3, 0xA7F4, 0xAB69};
  const bool same_version = ref["unicode_version"].get<std::string>().rfind(uc::data_version(), 0) == 0;
  std::string upper, lower, title, space, printable, cased;
  for (size_t i = 0; i < chars.size(); ++i) {
    const std::string c = uc::encode(chars.substr(i, 1));
    if (i > 0) {
      upper += '\0';
      lower += '\0';
      title += '\0';
    }
    upper += uc::upper(c);
    lower += uc::lower(c);
    title += uc::title(c);
    space += uc::is_space(chars[i]) ? '1' : '0';
    printable += uc::is_printable(chars[i]) ? '1' : '0';
    const bool changed = !same_version && version_changes.find(chars[i]) != std::u32string::npos;
    cased += (uc::is_cased(chars[i]) != changed) ? '1' : '0';  // Python's answer for a changed one
  }
  auto expect_same_text = [&](const std::string& ours, const char* key) {
    const std::string theirs = ref[key];
    if (ours == theirs) return;
    // Name the first few characters that differ.
    const std::u32string a = uc::decode(ours), b = uc::decode(theirs);
    ADD_FAILURE() << key << " differs from Python's (Unicode " << ref["unicode_version"].get<std::string>()
                  << ") at code point index " << std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
  };
  expect_same_text(upper, "upper");
  expect_same_text(lower, "lower");
  expect_same_text(title, "title");
  expect_same_text(space, "space");
  expect_same_text(printable, "printable");
  expect_same_text(cased, "cased");
  // Whole strings: context-dependent mappings (final sigma) and word starts (title).
  size_t k = 0, compared = 0;
  for (size_t i = 0; i < chars.size(); i += 97, ++k) {
    const std::u32string cps = chars.substr(i, 97);
    const bool changed = !same_version && std::any_of(cps.begin(), cps.end(), [&](char32_t c) {
      return version_changes.find(c) != std::u32string::npos;
    });
    if (changed) continue;
    const std::string chunk = uc::encode(cps);
    const std::pair<const char*, std::string> mapped[] = {
        {"chunks_lower", uc::lower(chunk)}, {"chunks_title", uc::title(chunk)}, {"chunks_capitalize", uc::capitalize(chunk)}};
    for (const auto& [key, ours] : mapped) {
      const std::string theirs = ref[key][k];
      ++compared;
      if (ours == theirs) continue;
      const std::u32string a = uc::decode(ours), b = uc::decode(theirs);
      const size_t at = static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
      ADD_FAILURE() << key << " of the string of code points " << i << ".." << i + 96 << " differs at index " << at
                    << ": zeroshard U+" << std::hex << (at < a.size() ? uint32_t(a[at]) : 0) << ", Python U+"
                    << (at < b.size() ? uint32_t(b[at]) : 0) << std::dec;
    }
  }
  EXPECT_GE(compared, 3 * (k - version_changes.size()));
}

}  // namespace
