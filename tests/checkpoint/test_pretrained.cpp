// SPDX-License-Identifier: Apache-2.0
// Pretrained weights into a sharded model (zeroshard/checkpoint/pretrained.h), at 1, 2 and 4 ranks:
// every value arrives exactly (every strategy, tied weights, buffers, bf16/fp16 files, renamed
// names), each rank reads only its shards' bytes, host memory stays near the rank's shards plus one
// unit (measured by the allocator), and every bad input is one clear error on every rank with
// the exact text. Files are safetensors written by SafetensorsWriter; torch.save files from real
// PyTorch are tested end to end by the round_trip job tests.

#include <ATen/ops/randn.h>
#include <torch/nn/module.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/resolve.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
using zs::test::message_of;
namespace fs = std::filesystem;

namespace {

using Strategy = zs::ShardingStrategy;

zs_test::GptConfig gpt_config() {
  zs_test::GptConfig c;
  c.layers = 6;
  return c;
}

// A directory every rank sees (one host), made by rank 0.
std::string shared_dir(const std::string& name) {
  const std::string dir = std::string(ZS_TEST_TMPDIR) + "/pretrained-" + name;
  if (zs::test::rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  zs::test::barrier();
  return dir;
}

// The source model's state, written by rank 0 as a safetensors file; `edit` may change the
// tensors (names, dtypes, shapes) before writing.
using State = std::vector<std::pair<std::string, at::Tensor>>;
State source_state(torch::nn::Module& m) {
  State out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value().detach().clone());
  return out;
}

void write_file(const std::string& path, const State& state) {
  if (zs::test::rank() == 0) {
    std::vector<zs::TensorInfo> infos;
    for (const auto& [k, v] : state) infos.push_back({k, v.scalar_type(), v.sizes().vec()});
    zs::SafetensorsWriter w(path, infos);
    for (const auto& [k, v] : state) w.write(k, v);
    w.finish();
  }
  zs::test::barrier();
}

State without(State s, const std::string& name) {
  s.erase(std::remove_if(s.begin(), s.end(), [&](const auto& kv) { return kv.first == name; }), s.end());
  return s;
}

// Largest |a - b| over every entry of `expected` (NaN: infinity), and whether names match.
double max_diff(const std::map<std::string, at::Tensor>& got, const State& expected, std::string* worst) {
  double m = 0;
  for (const auto& [k, v] : expected) {
    auto it = got.find(k);
    if (it == got.end()) {
      *worst = k + " (absent)";
      return INFINITY;
    }
    const double d = (it->second.to(at::kDouble) - v.to(at::kDouble)).abs().max().item<double>();
    if (!(d <= m)) {
      m = std::isnan(d) ? INFINITY : d;
      *worst = k;
    }
  }
  return m;
}

std::string failed_on_all_ranks() {
  std::string s;
  for (int r = 0; r < zs::test::world_size(); ++r) s += (r ? ", " : "") + std::to_string(r);
  return "loading pretrained weights failed on rank(s) " + s + ": ";
}

// A sharded GPT whose initial weights differ from the source's.
struct Sharded {
  explicit Sharded(zs::ShardingOptions o = {}) : init(zs::test::session(), o), model((torch::manual_seed(99), gpt_config())) {
    engine = std::make_unique<zs::ShardingEngine>(init, model.ptr());
  }
  zs::ShardedInit init;
  zs_test::Gpt model;
  std::unique_ptr<zs::ShardingEngine> engine;
};

const char* const kHint =
    " names are matched after model.init_strip_prefix, init_add_prefix and init_rename; model.init_strict=false "
    "loads what matches";

TEST(Pretrained, EveryStrategyLoadsExactlyReadingOnlyItsShards) {
  const std::string dir = shared_dir("exact");
  torch::manual_seed(1);
  zs_test::Gpt source(gpt_config());
  const State state = source_state(*source);
  write_file(dir + "/gpt.safetensors", without(state, "lm_head_weight"));  // tied: stored once
  for (Strategy s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard, Strategy::kHybridShard}) {
    SCOPED_TRACE(zs::to_string(s));
    zs::ShardingOptions o;
    o.strategy = s;
    o.hybrid_group_size = s == Strategy::kHybridShard && zs::test::world_size() >= 2 ? 2 : 0;
    Sharded m(o);
    const zs::PretrainedReport r = zs::load_pretrained(*m.engine, dir + "/gpt.safetensors");
    std::string worst;
    EXPECT_EQ(max_diff(m.engine->full_state_dict(), state, &worst), 0.0) << worst;
    // This rank read exactly the elements of its shards (padding excluded), nothing more.
    int64_t mine = 0;
    for (zs::FlatParam* f : zs::detail::flat_params(*m.engine)) {
      const int64_t lo = static_cast<int64_t>(f->shard_group().rank()) * f->shard_numel();
      mine += std::max<int64_t>(0, std::min(lo + f->shard_numel(), f->numel()) - lo);
    }
    EXPECT_EQ(r.elements_read, mine);
    EXPECT_EQ(r.bytes_read, mine * 4);
    EXPECT_EQ(r.tensors_loaded, static_cast<int64_t>(state.size()) - 1);  // the tied pair is one tensor
    EXPECT_TRUE(r.missing.empty() && r.unexpected.empty() && r.mismatched.empty()) << r.summary();
  }
}

TEST(Pretrained, BuffersLowPrecisionFilesAndRenamedNames) {
  const std::string dir = shared_dir("convert");
  torch::manual_seed(2);
  zs_test::BnNet source;
  source->train();
  source->forward(at::randn({8, 7}));  // non-trivial running statistics, num_batches_tracked = 1
  State state = source_state(*source);
  State file;
  for (const auto& [k, v] : state) {
    const bool floating = v.is_floating_point();
    // Parameters in bf16 or fp16 under a "model." prefix; "b1.fc.weight" renamed in the file.
    const at::Tensor stored = floating ? v.to(k.rfind("b0", 0) == 0 ? at::kHalf : at::kBFloat16) : v;
    file.emplace_back(k == "b1.fc.weight" ? std::string("model.second_fc") : "model." + k, stored);
  }
  write_file(dir + "/bn.safetensors", file);
  zs::ShardedInit init(zs::test::session(), {});
  torch::manual_seed(5);
  zs_test::BnNet model;
  zs::ShardingEngine engine(init, model.ptr());
  zs::PretrainedOptions o;
  o.strip_prefix = "model.";
  o.rename = {{"second_fc", "b1.fc.weight"}};
  zs::load_pretrained(engine, dir + "/bn.safetensors", o);
  State expected;
  for (size_t i = 0; i < state.size(); ++i) expected.emplace_back(state[i].first, file[i].second.to(state[i].second.scalar_type()));
  std::string worst;
  EXPECT_EQ(max_diff(engine.full_state_dict(), expected, &worst), 0.0) << worst;
  EXPECT_EQ(model->layers[0]->bn->num_batches_tracked.item<int64_t>(), 1);
}

TEST(Pretrained, StrictErrorsListWhatDoesNotFitOnEveryRank) {
  const std::string dir = shared_dir("strict");
  torch::manual_seed(1);
  zs_test::Gpt source(gpt_config());
  // The tied output layer is stored once (under wte.weight), as PyTorch's safetensors export does.
  const State state = without(source_state(*source), "lm_head_weight");
  State extra = state;
  extra.emplace_back("extra.weight", at::zeros({3}));
  State reshaped = without(state, "wpe.weight");
  reshaped.emplace_back("wpe.weight", at::zeros({7, 12}));
  State untied = state;
  untied.emplace_back("lm_head_weight", at::zeros({17, 12}));  // not the same tensor as wte.weight
  write_file(dir + "/missing.safetensors", without(state, "h1.fc.weight"));
  write_file(dir + "/extra.safetensors", extra);
  write_file(dir + "/reshaped.safetensors", reshaped);
  write_file(dir + "/untied.safetensors", untied);
  Sharded m;
  const std::string all = failed_on_all_ranks();
  auto fits = [&](const std::string& f) { return message_of<zs::CheckpointError>([&] { zs::load_pretrained(*m.engine, dir + "/" + f); }); };
  EXPECT_EQ(fits("missing.safetensors"), all + "pretrained weights '" + dir +
                                             "/missing.safetensors' do not fit the model: 1 missing from the file "
                                             "(h1.fc.weight [48, 12]);" + kHint);
  EXPECT_EQ(fits("extra.safetensors"), all + "pretrained weights '" + dir +
                                           "/extra.safetensors' do not fit the model: 1 not in the model (extra.weight "
                                           "[3]);" + kHint);
  EXPECT_EQ(fits("reshaped.safetensors"), all + "pretrained weights '" + dir +
                                              "/reshaped.safetensors' do not fit the model: 1 of another shape "
                                              "(wpe.weight: file [7, 12], model [6, 12]);" + kHint);
  EXPECT_EQ(fits("untied.safetensors"), all + "pretrained weights '" + dir +
                                            "/untied.safetensors' do not fit the model: lm_head_weight: the model ties "
                                            "it, the file holds 'lm_head_weight' and 'wte.weight' as separate tensors;" +
                                            kHint);
  // Nothing was loaded: the model still has its own initial weights.
  zs_test::Gpt own((torch::manual_seed(99), gpt_config()));
  std::string worst;
  EXPECT_EQ(max_diff(m.engine->full_state_dict(), source_state(*own), &worst), 0.0) << worst;
}

TEST(Pretrained, NotStrictLoadsWhatMatchesAndReportsTheRest) {
  const std::string dir = shared_dir("lenient");
  torch::manual_seed(1);
  zs_test::Gpt source(gpt_config());
  State file = without(without(source_state(*source), "h1.fc.weight"), "lm_head_weight");
  file.emplace_back("extra.weight", at::zeros({3}));
  write_file(dir + "/partial.safetensors", file);
  Sharded m;
  zs::PretrainedOptions o;
  o.strict = false;
  const zs::PretrainedReport r = zs::load_pretrained(*m.engine, dir + "/partial.safetensors", o);
  EXPECT_EQ(r.missing, std::vector<std::string>{"h1.fc.weight [48, 12]"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"extra.weight [3]"});
  const auto got = m.engine->full_state_dict();
  std::string worst;
  EXPECT_EQ(max_diff(got, without(file, "extra.weight"), &worst), 0.0) << worst;
  zs_test::Gpt own((torch::manual_seed(99), gpt_config()));  // the skipped one keeps its initial value
  EXPECT_TRUE(got.at("h1.fc.weight").equal(own->named_parameters()["h1.fc.weight"]));
}

TEST(Pretrained, DamagedFilesNameTheFileAndTheTensor) {
  const std::string dir = shared_dir("damaged");
  torch::manual_seed(1);
  zs_test::Gpt source(gpt_config());
  write_file(dir + "/whole.safetensors", without(source_state(*source), "lm_head_weight"));
  if (zs::test::rank() == 0) {
    fs::copy_file(dir + "/whole.safetensors", dir + "/truncated.safetensors");
    fs::resize_file(dir + "/truncated.safetensors", fs::file_size(dir + "/whole.safetensors") - 100);
    std::ofstream(dir + "/notes.txt") << "these are not weights\n";
  }
  zs::test::barrier();
  Sharded m;
  const std::string all = failed_on_all_ranks();
  std::string e = message_of<zs::CheckpointError>([&] { zs::load_pretrained(*m.engine, dir + "/truncated.safetensors"); });
  EXPECT_EQ(e.rfind(all + "safetensors file '" + dir + "/truncated.safetensors' is truncated: tensor '", 0), 0u) << e;
  EXPECT_NE(e.find("' ends at data byte "), std::string::npos) << e;
  e = message_of<zs::CheckpointError>([&] { zs::load_pretrained(*m.engine, dir + "/notes.txt"); });
  EXPECT_EQ(e.rfind(all + "'" + dir + "/notes.txt' (22 bytes) is not a tensor file zeroshard reads", 0), 0u) << e;
  e = message_of<zs::CheckpointError>([&] { zs::load_pretrained(*m.engine, dir + "/absent.safetensors"); });
  EXPECT_EQ(e, all + "cannot open tensor file '" + dir + "/absent.safetensors': No such file or directory (errno 2)");
}

// The whole model is never on a rank: while building it sharded and loading the weights, this
// rank's host allocations stay at its shards plus the root's own parameters plus the largest
// other unit (each whole while it is built), measured by the tracking allocator.
TEST(Pretrained, HostMemoryIsTheShardsPlusTheUnitBeingBuilt) {
  const std::string dir = shared_dir("memory");
  zs_test::GptConfig big = gpt_config();
  big.layers = 8, big.dim = 32, big.vocab = 64;
  int64_t model_bytes = 0;
  {
    torch::manual_seed(1);
    zs_test::Gpt source(big);
    write_file(dir + "/gpt.safetensors", without(source_state(*source), "lm_head_weight"));
    for (const auto& p : source->parameters()) model_bytes += p.nbytes();
    model_bytes -= source->wte->weight.nbytes();  // counted twice (tied)
  }
  zs::begin_host_memory_window();
  zs::ShardedInit init(zs::test::session(), {});
  zs_test::Gpt model(big);
  zs::ShardingEngine engine(init, model.ptr());
  zs::load_pretrained(engine, dir + "/gpt.safetensors");
  const int64_t peak = zs::host_memory_window_peak();
  // The root's own parameters (embeddings) are built first and stay whole until the engine takes
  // the model; every other unit is whole only while it is built.
  int64_t shards = 0, root = 0, largest_unit = 0;
  const std::vector<zs::FlatParam*> flats = zs::detail::flat_params(engine);  // the root's first
  for (size_t i = 0; i < flats.size(); ++i) {
    shards += flats[i]->shard_numel() * 4;
    if (i == 0) root = flats[i]->padded_numel() * 4;
    else largest_unit = std::max<int64_t>(largest_unit, flats[i]->padded_numel() * 4);
  }
  std::printf("rank %d of %d: model %lld bytes, shards %lld, root %lld, largest unit %lld, measured peak %lld\n",
              zs::test::rank(), zs::test::world_size(), static_cast<long long>(model_bytes),
              static_cast<long long>(shards), static_cast<long long>(root), static_cast<long long>(largest_unit),
              static_cast<long long>(peak));
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, shards + root + largest_unit + (4 << 10)) << "4 KiB for small tensors (positions, masks)";
  if (zs::test::world_size() >= 2) EXPECT_LT(peak, model_bytes) << "a rank never holds the whole model";
}

// model.init_* resolved (a malformed rename list is refused by validation:
// tests/config/test_config_rules.cpp).
TEST(Pretrained, RenameListFromTheConfig) {
  zs::Config cfg = zs::default_config();
  cfg.mutable_model()->set_init_rename("a.w=b.w, c=d");  // spaces around pairs are ignored
  cfg.mutable_model()->set_init_strip_prefix("module.");
  const zs::PretrainedOptions o = zs::resolve(cfg).pretrained;
  EXPECT_EQ(o.rename, (std::map<std::string, std::string>{{"a.w", "b.w"}, {"c", "d"}}));
  EXPECT_EQ(o.strip_prefix, "module.");
  EXPECT_TRUE(o.strict);
  EXPECT_TRUE(o.not_required.empty()) << "without LoRA every model parameter comes from the file";
  cfg.mutable_lora()->set_rank(4);
  EXPECT_EQ(zs::resolve(cfg).pretrained.not_required, (std::vector<std::string>{"*lora_A", "*lora_B"}))
      << "LoRA adapters start fresh over pretrained weights";
}

}  // namespace
