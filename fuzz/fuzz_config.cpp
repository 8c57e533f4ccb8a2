// SPDX-License-Identifier: Apache-2.0
// Configs (config/config.h): textproto or JSON (the first byte chooses), parsed and validated.

#include <string>

#include "fuzz_input.h"
#include "zeroshard/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  zs_fuzz::expect_clean([&] {
    const zeroshard::Config c = (data[0] & 1) != 0 ? zeroshard::parse_config_json(text, "fuzz.json")
                                                   : zeroshard::parse_config_textproto(text, "fuzz.textproto");
    zeroshard::validate_config(c);
  });
  return 0;
}
