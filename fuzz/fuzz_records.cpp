// SPDX-License-Identifier: Apache-2.0
// JSONL training records (data/jsonl.h) and chat templates (text/chat_template.h): the input's
// first line is parsed as a record; the rest is a template rendered over a fixed conversation.

#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "zeroshard/data/jsonl.h"
#include "zeroshard/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nl = all.find('\n');
  const std::string_view line = all.substr(0, nl), rest = nl == std::string_view::npos ? "" : all.substr(nl + 1);
  zs_fuzz::expect_clean([&] { zeroshard::data::parse_record(line); });
  zs_fuzz::expect_clean([&] {
    const zeroshard::text::ChatTemplate t(std::string(rest), "fuzz template");
    zeroshard::text::RenderOptions o;
    o.variables = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    t.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}}, o);
  });
  return 0;
}
