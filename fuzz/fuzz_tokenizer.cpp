// SPDX-License-Identifier: Apache-2.0
// Hugging Face tokenizer.json files (text/tokenizer.h): loaded, then a fixed text encoded and the
// ids decoded again.

#include <filesystem>

#include "fuzz_input.h"
#include "zeroshard/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = zs_fuzz::work_dir() + "/tokenizer";
  std::filesystem::create_directories(dir);
  zs_fuzz::write_input(data, size, "tokenizer/tokenizer.json");
  zs_fuzz::expect_clean([&] {
    auto tok = zeroshard::text::load_tokenizer(dir);
    const std::vector<int32_t> ids = tok->encode("Hello, world! 12345 \xc3\xa9t\xc3\xa9 <|eot_id|>\n  x");
    tok->decode(ids);
  });
  return 0;
}
