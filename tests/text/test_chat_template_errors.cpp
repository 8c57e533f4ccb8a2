// SPDX-License-Identifier: Apache-2.0
// Bad chat templates and bad conversations: each is refused with the exact message a user sees,
// naming the source, the line and the construct.

#include <gtest/gtest.h>

#include <functional>

#include "common/error_text.h"
#include "zeroshard/text/chat_template.h"

namespace {
using zeroshard::test::message_of;

namespace zt = zeroshard::text;

const char* const kFilters =
    "abs, capitalize, count, d, default, dictsort, first, float, indent, int, items, join, last, length, list, "
    "lower, map, max, min, reject, rejectattr, replace, reverse, round, safe, select, selectattr, sort, string, "
    "sum, title, tojson, trim, unique, upper";
const char* const kTests =
    "boolean, callable, defined, divisibleby, eq, equalto, even, false, float, ge, gt, greaterthan, in, integer, "
    "iterable, le, lower, lt, lessthan, mapping, ne, none, number, odd, sequence, string, true, undefined, upper";
const char* const kTags = "if/elif/else, for/else, set, macro, filter, break, continue, raw, generation";

// The message of the zeroshard error `fn` throws, with its kind checked.
std::string parse_error(const std::string& source) {
  return message_of<zeroshard::ConfigError>([&] { zt::ChatTemplate(source, "bad.jinja"); });
}

std::string render_error(const std::string& source, const std::vector<zt::ChatMessage>& messages) {
  return message_of<zeroshard::ConfigError>([&] { zt::ChatTemplate(source, "bad.jinja").render(messages, false); });
}

const std::vector<zt::ChatMessage> kTwo = {{"user", "hi"}, {"assistant", "hello"}};

TEST(ChatTemplateErrors, UnsupportedConstructsNameTheTagAndLine) {
  EXPECT_EQ(parse_error("{{ bos_token }}\n{% extends 'base.jinja' %}"),
            std::string("bad.jinja:2: unsupported construct '{% extends %}': a chat template must be one "
                        "self-contained template using only these tags: ") + kTags);
  EXPECT_EQ(parse_error("{% include 'header.jinja' %}"),
            std::string("bad.jinja:1: unsupported construct '{% include %}': a chat template must be one "
                        "self-contained template using only these tags: ") + kTags);
  EXPECT_EQ(parse_error("a\nb\n{% call show() %}x{% endcall %}"),
            std::string("bad.jinja:3: unsupported construct '{% call %}': a chat template must be one "
                        "self-contained template using only these tags: ") + kTags);
  EXPECT_EQ(parse_error("{% frobnicate %}"),
            std::string("bad.jinja:1: unknown tag '{% frobnicate %}' (supported tags: ") + kTags + ")");
  EXPECT_EQ(parse_error("{% for x in xs recursive %}{% endfor %}"),
            "bad.jinja:1: recursive loops ('{% for ... recursive %}') are not supported");
  EXPECT_EQ(parse_error("{{ f(*args) }}"), "bad.jinja:1: argument unpacking (*args, **kwargs) is not supported");
}

TEST(ChatTemplateErrors, UnterminatedTagsNameTheLineTheyStartOn) {
  EXPECT_EQ(parse_error("Hello\n{{ messages[0]['content']\n\n"), "bad.jinja:2: unterminated tag: '{{' has no '}}'");
  EXPECT_EQ(parse_error("{% if true"), "bad.jinja:1: unterminated tag: '{%' has no '%}'");
  EXPECT_EQ(parse_error("a\n{# a note"), "bad.jinja:2: unterminated comment: '{#' has no '#}'");
  EXPECT_EQ(parse_error("{{ 'abc }}"), "bad.jinja:1: unterminated string literal");
  EXPECT_EQ(parse_error("{% for m in messages %}\n{{ m.content }}"),
            "bad.jinja:2: '{% for %}' opened on line 1 is never closed: expected '{% endfor %}'");
  EXPECT_EQ(parse_error("{% if a %}\n{% elif b %}\n{% else %}"),
            "bad.jinja:3: '{% if %}' opened on line 1 is never closed: expected '{% endif %}'");
  EXPECT_EQ(parse_error("{% raw %}{{ x }}"), "bad.jinja:1: '{% raw %}' is never closed: expected '{% endraw %}'");
}

TEST(ChatTemplateErrors, MisplacedTagsAndBadSyntax) {
  EXPECT_EQ(parse_error("{% endif %}"), "bad.jinja:1: unexpected '{% endif %}': no block is open");
  EXPECT_EQ(parse_error("{% if x %}\n{% endfor %}"),
            "bad.jinja:2: unexpected '{% endfor %}': the innermost open block is '{% if %}' from line 1, closed by "
            "'{% endif %}'");
  EXPECT_EQ(parse_error("{% break %}"), "bad.jinja:1: '{% break %}' is only allowed inside a '{% for %}' loop");
  EXPECT_EQ(parse_error("{{ }}"), "bad.jinja:1: expected an expression, got '}}'");
  EXPECT_EQ(parse_error("{{ a b }}"), "bad.jinja:1: expected '}}', got 'b'");
  EXPECT_EQ(parse_error("{{ (1 + 2 }}"), "bad.jinja:1: unexpected '}', expected ')'");
  EXPECT_EQ(parse_error("{{ 1 + 2) }}"), "bad.jinja:1: unexpected ')'");
  EXPECT_EQ(parse_error("{{ [1, 2) }}"), "bad.jinja:1: unexpected ')', expected ']'");
  EXPECT_EQ(parse_error("{{ a @ b }}"), "bad.jinja:1: unexpected character '@' in a tag");
  EXPECT_EQ(parse_error("{% macro m(a=1, b) %}{% endmacro %}"),
            "bad.jinja:1: non-default argument 'b' follows default argument");
  EXPECT_EQ(parse_error("ok\xff"), "bad.jinja:1: the template is not valid UTF-8 (byte 2)");
}

TEST(ChatTemplateErrors, UnknownFiltersAndTestsListWhatIsSupported) {
  EXPECT_EQ(parse_error("{{ messages | shout }}"),
            std::string("bad.jinja:1: unknown filter 'shout' (supported filters: ") + kFilters + ")");
  EXPECT_EQ(parse_error("\n{{ '%s' | format(1) }}"),
            std::string("bad.jinja:2: unsupported filter 'format' (supported filters: ") + kFilters + ")");
  EXPECT_EQ(parse_error("{% if x is shiny %}{% endif %}"),
            std::string("bad.jinja:1: unknown test 'shiny' (supported tests: ") + kTests + ")");
  EXPECT_EQ(parse_error("{% if x is sameas y %}{% endif %}"),
            std::string("bad.jinja:1: unsupported test 'sameas' (supported tests: ") + kTests + ")");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  const std::string source =
      "{# roles alternate #}\n"
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
      "{% endif %}{{ m.content }}{% endfor %}";
  const zt::ChatTemplate tmpl(source, "mistral.jinja");
  EXPECT_EQ(tmpl.render(kTwo, false), "hihello");
  const std::string message = message_of<zt::ChatTemplateError>(
      [&] { tmpl.render({{"user", "a"}, {"user", "b"}}, false); });
  EXPECT_EQ(message, "mistral.jinja:2: the template raised an error: Conversation roles must alternate "
                     "user/assistant/user/assistant/...");
}

TEST(ChatTemplateErrors, RenderErrorsNameTheLineAndWhatPythonWouldSay) {
  EXPECT_EQ(render_error("{{ 'a' + 1 }}", kTwo), "bad.jinja:1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("\n\n{{ messages[3].content }}", kTwo), "bad.jinja:3: list object has no element 3");
  EXPECT_EQ(render_error("{{ nothing.attribute }}", kTwo), "bad.jinja:1: 'nothing' is undefined");
  EXPECT_EQ(render_error("{{ messages[0].content | tojson(indent=x.y) }}", kTwo), "bad.jinja:1: 'x' is undefined");
  EXPECT_EQ(render_error("{{ missing | tojson }}", kTwo),
            "bad.jinja:1: tojson: an undefined value is not JSON serializable ('missing' is undefined) (in the "
            "filter 'tojson')");
  EXPECT_EQ(render_error("{{ 'x'.format(1) }}", kTwo),
            "bad.jinja:1: the str method 'format' is not supported in chat templates");
  EXPECT_EQ(render_error("{% set n = 3 %}{% set n.x = 1 %}", kTwo),
            "bad.jinja:1: cannot set 'n.x': 'n' is not a namespace() object");
  EXPECT_EQ(render_error("{% for a, b, c in messages %}{% endfor %}", kTwo),
            "bad.jinja:1: not enough values to unpack (expected 3, got 2)");
  EXPECT_EQ(render_error("{{ 1 // 0 }}", kTwo), "bad.jinja:1: integer division or modulo by zero");
  EXPECT_EQ(render_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", kTwo),
            "bad.jinja:1: macro calls nested more than 100 deep (a recursive macro?)");
}

TEST(ChatTemplateErrors, BadConversationsAndVariables) {
  const zt::ChatTemplate tmpl("{% for m in messages %}{{ m.content }}{% endfor %}", "ok.jinja");
  EXPECT_EQ(message_of<zeroshard::ConfigError>([&] { tmpl.render_json(R"({"messages": 3})", {}); }),
            "conversation JSON: expected an object with a \"messages\" list");
  EXPECT_EQ(message_of<zeroshard::ConfigError>([&] { tmpl.render_json(R"({"messages": ["hi"]})", {}); }),
            "conversation JSON: messages[0] is not an object");
  EXPECT_EQ(message_of<zeroshard::ConfigError>([&] { tmpl.render_json(R"({"messages": [}")", {}); })
                .rfind("conversation JSON: not valid JSON: ", 0),
            0u);
  EXPECT_EQ(message_of<zeroshard::UsageError>([&] { tmpl.render({{"user", "ab\xc3"}}, false); }),
            "the content of message 0 is not valid UTF-8 (byte 2)");
  zt::RenderOptions options;
  options.variables = {{"tools", "x"}};
  options.json_variables = R"({"tools": []})";
  EXPECT_EQ(message_of<zeroshard::UsageError>([&] { tmpl.render(kTwo, options); }),
            "chat template variable 'tools' is given twice (messages and add_generation_prompt come from the render "
            "call; the others from RenderOptions and the conversation)");
  options = {};
  options.variables = {{"messages", "x"}};
  EXPECT_EQ(message_of<zeroshard::UsageError>([&] { tmpl.render(kTwo, options); }),
            "chat template variable 'messages' is given twice (messages and add_generation_prompt come from the "
            "render call; the others from RenderOptions and the conversation)");
}

TEST(ChatTemplateErrors, TemplatesWhosePrefixesDoNotNestHaveNoSpans) {
  // The generation prompt is not how the template starts an assistant turn.
  const zt::ChatTemplate prompt_differs(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
      "{% if add_generation_prompt %}<bot>{% endif %}",
      "prompt.jinja");
  EXPECT_EQ(message_of<zeroshard::ConfigError>([&] { prompt_differs.render_for_training(kTwo, {}); }),
            "prompt.jinja: assistant message 1: the render of messages[:1] with add_generation_prompt=true is not a "
            "prefix of the render of messages[:2] (at byte 13: 'bot>' against 'assistant>hello</s>'): the template "
            "changes what precedes an assistant message once the message is there (a generation prompt unlike the "
            "turn's start, or text that moves to the last user turn), so the turn's span cannot be found from "
            "prefixes");
  // Mistral v0.3 puts the system text into the last user turn, wherever that is.
  const zt::ChatTemplate mistral(
      "{%- if messages[0]['role'] == 'system' %}{%- set system_text = messages[0]['content'] %}"
      "{%- set rest = messages[1:] %}{%- else %}{%- set rest = messages %}{%- endif %}"
      "{%- for m in rest %}{%- if m.role == 'user' %}{%- if loop.last and system_text is defined %}"
      "{{- '[INST] ' + system_text + '\\n\\n' + m.content + '[/INST]' }}{%- else %}"
      "{{- '[INST] ' + m.content + '[/INST]' }}{%- endif %}{%- else %}{{- ' ' + m.content + '</s>' }}{%- endif %}"
      "{%- endfor %}",
      "mistral.jinja");
  EXPECT_EQ(message_of<zeroshard::ConfigError>([&] {
              mistral.render_for_training({{"system", "Be brief."}, {"user", "hi"}, {"assistant", "hello"}}, {});
            }),
            "mistral.jinja: assistant message 2: the render of messages[:2] with add_generation_prompt=true is not "
            "a prefix of the render of messages[:3] (at byte 7: 'Be brief.\\n\\nhi[/INST]' against 'hi[/INST] "
            "hello</s>'): the template changes what precedes an assistant message once the message is there (a "
            "generation prompt unlike the turn's start, or text that moves to the last user turn), so the turn's "
            "span cannot be found from prefixes");
  // Earlier assistant turns are rendered differently once later messages follow (as templates
  // that drop past reasoning do).
  const zt::ChatTemplate rewrites_history(
      "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}<assistant>[earlier]</s>"
      "{% else %}<{{ m.role }}>{{ m.content }}</s>{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "history.jinja");
  EXPECT_EQ(message_of<zeroshard::ConfigError>(
                [&] { rewrites_history.render_for_training({{"user", "q"}, {"assistant", "a"}, {"user", "r"}}, {}); }),
            "history.jinja: assistant message 1: the render of messages[:2] is not a prefix of the render of the "
            "whole conversation (at byte 22: 'a</s>' against '[earlier]</s><user>r</s>'), nor is it one followed "
            "by the eos_token: this template renders the turn differently once later messages follow, so its span "
            "cannot be found from prefixes");
}

}  // namespace
