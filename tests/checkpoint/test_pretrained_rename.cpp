// SPDX-License-Identifier: Apache-2.0
// Pretrained weights under another naming scheme (zeroshard/checkpoint/pretrained.h,
// PretrainedOptions::rename_patterns), at 1 and 2 ranks: a GPT stored under GPT-2-style names loads
// exactly through {N} templates and a regular expression with groups, after strip_prefix and
// beside an exact pair; every malformed pattern and a rename that puts two file tensors under one
// name is one error on every rank naming the pattern, with the exact text.

#include <ATen/ops/randn.h>

#include <filesystem>
#include <map>
#include <string>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/formats/tensor_file.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;
using Kind = zs::RenamePattern::Kind;

namespace {

// The GPT's names as a GPT-2 checkpoint spells them.
std::string gpt2_name(const std::string& ours) {
  static const std::vector<std::pair<std::string, std::string>> kParts = {
      {".ln1.", ".ln_1."}, {".ln2.", ".ln_2."}, {".qkv.", ".attn.c_attn."}, {".proj.", ".attn.c_proj."},
      {".fc.", ".mlp.c_fc."}, {".out.", ".mlp.c_proj."}};
  if (ours[0] != 'h') return "transformer." + ours;  // wte, wpe, ln_f
  const size_t dot = ours.find('.');
  std::string rest = ours.substr(dot);
  for (const auto& [from, to] : kParts) {
    if (rest.rfind(from, 0) == 0) rest = to + rest.substr(from.size());
  }
  return "transformer.h." + ours.substr(1, dot - 1) + rest;
}

struct Files {
  std::string dir;
  std::map<std::string, at::Tensor> source;  // our names -> values
};

// Rank 0 writes a GPT's weights under GPT-2's names (the tied head once, as wte).
Files write_gpt2_file(zs_test::GptConfig c) {
  Files f;
  f.dir = std::string(ZS_TEST_TMPDIR) + "/pretrained-rename";
  torch::manual_seed(3);
  zs_test::Gpt gpt(c);
  std::vector<zs::TensorInfo> infos;
  for (const auto& p : gpt->named_parameters()) {
    if (p.key() == "lm_head_weight") continue;
    f.source[p.key()] = p.value().detach().clone();
    infos.push_back({gpt2_name(p.key()), at::kFloat, p.value().sizes().vec()});
  }
  if (zs::test::rank() == 0) {
    fs::remove_all(f.dir);
    fs::create_directories(f.dir);
    zs::SafetensorsWriter w(f.dir + "/gpt2.safetensors", infos);
    for (const auto& [name, value] : f.source) w.write(gpt2_name(name), value);
    w.finish();
  }
  zs::test::barrier();
  return f;
}

zs_test::GptConfig config() {
  zs_test::GptConfig c;
  c.layers = 3;
  return c;
}

// GPT-2's names to ours: the prefix stripped, one exact pair, templates and one regular expression.
zs::PretrainedOptions gpt2_options() {
  zs::PretrainedOptions o;
  o.strip_prefix = "transformer.";
  o.rename = {{"h.0.attn.c_attn.weight", "h0.qkv.weight"}};  // exact pairs come before patterns
  o.rename_patterns = {
      {Kind::kTemplate, "h.{N}.ln_{K}.{P}", "h{N}.ln{K}.{P}"},
      {Kind::kTemplate, "h.{N}.attn.c_attn.weight", "h{N}.qkv.weight"},
      {Kind::kTemplate, "h.{N}.attn.c_proj.{P}", "h{N}.proj.{P}"},
      {Kind::kRegex, R"(h\.(\d+)\.mlp\.c_(fc|proj)\.(weight|bias))", "h$1.$2.$3"},
  };
  return o;
}

std::string load_error(const std::string& path, const zs::PretrainedOptions& o) {
  zs::ShardedInit init(zs::test::session(), {});
  zs_test::Gpt model(config());
  zs::ShardingEngine engine(init, model.ptr());
  try {
    zs::load_pretrained(engine, path, o);
  } catch (const zs::CheckpointError& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<not a CheckpointError: ") + e.what() + ">";
  }
  return "<no error>";
}

std::string on_every_rank(const std::string& message) {
  std::string ranks;
  for (int r = 0; r < zs::test::world_size(); ++r) ranks += (r ? ", " : "") + std::to_string(r);
  return "loading pretrained weights failed on rank(s) " + ranks + ": " + message;
}

}  // namespace

TEST(PretrainedRename, TemplatesAndRegularExpressionsLoadEveryValueExactly) {
  const Files f = write_gpt2_file(config());
  zs::ShardedInit init(zs::test::session(), {});
  torch::manual_seed(99);
  zs_test::Gpt model(config());
  zs::ShardingEngine engine(init, model.ptr());
  zs::PretrainedOptions o = gpt2_options();
  // "mlp.c_proj" must become "out", not "proj": a template placed first takes it.
  o.rename_patterns.insert(o.rename_patterns.begin(), {Kind::kTemplate, "h.{N}.mlp.c_proj.{P}", "h{N}.out.{P}"});
  const zs::PretrainedReport r = zs::load_pretrained(engine, f.dir + "/gpt2.safetensors", o);
  EXPECT_TRUE(r.missing.empty() && r.unexpected.empty() && r.mismatched.empty()) << r.summary();
  const std::map<std::string, at::Tensor> got = engine.full_state_dict();
  for (const auto& [name, value] : f.source) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(zs::test::max_abs_diff(got.at(name), value), 0.0) << name;
  }
}

TEST(PretrainedRename, ARenameThatMergesTwoTensorsNamesThePattern) {
  const Files f = write_gpt2_file(config());
  // Without the template for mlp.c_proj, the regex sends h.N.mlp.c_proj.weight to hN.proj.weight,
  // where h.N.attn.c_proj.weight already went.
  EXPECT_EQ(load_error(f.dir + "/gpt2.safetensors", gpt2_options()),
            on_every_rank("pretrained weights '" + f.dir + "/gpt2.safetensors': 'transformer.h.0.attn.c_proj.weight' and "
                          "'transformer.h.0.mlp.c_proj.weight' both become model name 'h0.proj.weight' (the second by "
                          "rename pattern 'h\\.(\\d+)\\.mlp\\.c_(fc|proj)\\.(weight|bias)=h$1.$2.$3')"));
}

TEST(PretrainedRename, MalformedPatternsAreErrorsNamingThePattern) {
  const Files f = write_gpt2_file(config());
  const std::string path = f.dir + "/gpt2.safetensors";
  auto with = [&](zs::RenamePattern p) {
    zs::PretrainedOptions o;
    o.rename_patterns = {std::move(p)};
    return load_error(path, o);
  };
  EXPECT_EQ(with({Kind::kTemplate, "h.{N}.fc.weight", "h{M}.fc.weight"}),
            on_every_rank("rename pattern 'h.{N}.fc.weight=h{M}.fc.weight': {M} in the model name is not in the file name"));
  EXPECT_EQ(with({Kind::kTemplate, "h.{N}.{N}.weight", "h{N}.weight"}),
            on_every_rank("rename pattern 'h.{N}.{N}.weight=h{N}.weight': {N} appears twice in the file name"));
  EXPECT_EQ(with({Kind::kTemplate, "h.{N.x}.fc", "x"}),
            on_every_rank("rename pattern 'h.{N.x}.fc=x': placeholder '{N.x}' in the file name is not a name (letters, "
                          "digits and '_', such as {N})"));
  EXPECT_EQ(with({Kind::kTemplate, "h.{N", "x"}),
            on_every_rank("rename pattern 'h.{N=x': the file name has a '{' without its '}'"));
  EXPECT_EQ(with({Kind::kRegex, R"(h\.(\d+)\.fc)", "h$2.fc"}),
            on_every_rank("rename pattern 'h\\.(\\d+)\\.fc=h$2.fc': $2 refers to group 2 but the expression has 1 group"));
  EXPECT_EQ(with({Kind::kRegex, "", "x"}),
            on_every_rank("rename pattern '=x': both the file name and the model name must be given"));
  const std::string bad = with({Kind::kRegex, R"(h\.(\d+\.fc)", "x"});
  const std::string prefix = on_every_rank("rename pattern 'h\\.(\\d+\\.fc=x': 'h\\.(\\d+\\.fc' is not a valid regular "
                                           "expression (");
  EXPECT_EQ(bad.substr(0, prefix.size()), prefix) << bad;  // then the regex library's own words
  EXPECT_EQ(bad.back(), ')') << bad;
}
