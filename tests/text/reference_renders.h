// SPDX-License-Identifier: Apache-2.0
#pragma once
// Renders template cases with the two reference implementations of chat templates and returns
// their outputs: @huggingface/jinja (Node, from the pinned test clients) and Python's Jinja2 set
// up as Hugging Face transformers sets it up (/usr/bin/python3 with python3-jinja2). Both run
// once per call over all cases. A missing reference is reported, never skipped.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zeroshard::test {

using Json = nlohmann::ordered_json;

struct RenderCase {
  std::string name;
  std::string template_text;
  Json context = Json::object();  // the template's variables
  Json now;                       // [y, m, d, H, M, S] for strftime_now(), or null
};

struct ReferenceRenders {
  std::string problem;  // why the references could not run ("" when they did)
  Json js;              // name -> {"output": ...} or {"error": ...}
  Json python;
};

ReferenceRenders render_with_references(const std::vector<RenderCase>& cases);

// Files of the source tree and the scratch folder of this test process.
std::string source_path(const std::string& relative);
std::string read_text_file(const std::string& path);
std::string scratch_dir();
// Runs a shell command; "" on success, else its exit status and the end of its output.
std::string run_command(const std::string& command);

}  // namespace zeroshard::test
