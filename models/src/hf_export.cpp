// SPDX-License-Identifier: Apache-2.0
// A checkpoint of a Llama-family model as a Hugging Face directory (hf_export.h): the plan every
// rank computes alike (units to ranks, tensors to files), then each rank's files, then rank 0's
// config.json and index.

#include "zeroshard/models/hf_export.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "export_dir.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint_tensors.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama_checkpoint.h"

namespace zeroshard::models {
namespace {

const char* dtype_name(c10::ScalarType t) {
  return t == c10::kBFloat16 ? "bfloat16" : t == c10::kHalf ? "float16" : "float32";
}

// config.json's torch_dtype (or dtype) when it is one the export writes, else fp32.
c10::ScalarType default_dtype(const std::string& config_json) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) continue;
    const std::string v = j[key].get<std::string>();
    if (v == "bfloat16" || v == "float16" || v == "float32") return hf_dtype_from_string(v);
  }
  return c10::kFloat;
}

struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  int rank = 0;  // the rank that writes it
};

struct OutFile {
  int rank = 0;
  std::vector<size_t> tensors;  // indices into the OutTensor list
  int64_t bytes = 0;
  std::string name;
};

// Units to ranks: each unit (all its tensors) goes to the rank whose equal share of the bytes
// holds the unit's middle, so every rank gets a contiguous run of units of about the same size.
void assign_ranks(std::vector<OutTensor>& tensors, const ckpt::CheckpointTensors& t, int ranks) {
  std::vector<std::string> units;  // in order of first appearance
  std::map<std::string, int64_t> unit_bytes;
  int64_t total = 0;
  for (const OutTensor& o : tensors) {
    const std::string& u = t.param(o.name).unit;
    if (!unit_bytes.count(u)) units.push_back(u);
    unit_bytes[u] += o.bytes;
    total += o.bytes;
  }
  std::map<std::string, int> rank_of;
  int64_t before = 0;
  for (const std::string& u : units) {
    const double middle = static_cast<double>(before) + static_cast<double>(unit_bytes[u]) / 2;
    const int r = total == 0 ? 0 : static_cast<int>(middle * ranks / static_cast<double>(total));
    rank_of[u] = std::min(r, ranks - 1);
    before += unit_bytes[u];
  }
  for (OutTensor& o : tensors) o.rank = rank_of[t.param(o.name).unit];
}

// Each rank's tensors, in order, into files of at most `max` bytes (a larger tensor alone), as
// transformers splits a state dict; rank 0's files first. Names as transformers gives them.
std::vector<OutFile> plan_files(const std::vector<OutTensor>& tensors, int ranks, int64_t max) {
  std::vector<OutFile> files;
  for (int r = 0; r < ranks; ++r) {
    OutFile current{r, {}, 0, ""};
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].rank != r) continue;
      const int64_t b = tensors[i].bytes;
      if (b > max) {
        files.push_back({r, {i}, b, ""});
        continue;
      }
      if (!current.tensors.empty() && current.bytes + b > max) {
        files.push_back(current);
        current = OutFile{r, {}, 0, ""};
      }
      current.tensors.push_back(i);
      current.bytes += b;
    }
    if (!current.tensors.empty()) files.push_back(current);
  }
  for (size_t k = 0; k < files.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, files.size());
    files[k].name = files.size() == 1 ? "model.safetensors" : name;
  }
  return files;
}

// config.json as recorded, with torch_dtype (and dtype, where present) set to what was written and
// the architecture named where the recorded one did not.
std::string config_json(const LlamaCheckpoint& ck, c10::ScalarType dtype) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(ck.config_json);
  j["torch_dtype"] = dtype_name(dtype);
  if (j.contains("dtype")) j["dtype"] = dtype_name(dtype);
  if (!j.contains("architectures")) {
    const std::string& m = ck.config.model_type;
    j["architectures"] = {m == "qwen2" ? "Qwen2ForCausalLM" : m == "mistral" ? "MistralForCausalLM" : "LlamaForCausalLM"};
  }
  return j.dump(2) + "\n";
}

// model.safetensors.index.json as transformers writes it (keys sorted, indent 2).
std::string index_json(const std::vector<OutTensor>& tensors, const std::vector<OutFile>& files, int64_t total) {
  nlohmann::json weight_map = nlohmann::json::object();
  for (const OutFile& f : files) {
    for (size_t i : f.tensors) weight_map[tensors[i].name] = f.name;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

// The tensors the directory holds: the checkpoint's parameters (merged, adapters left out), which
// must be exactly those config.json describes.
std::vector<OutTensor> out_tensors(const LlamaCheckpoint& ck, const ckpt::CheckpointTensors& t, c10::ScalarType dtype) {
  ZS_REQUIRE(t.tensors().size() == t.params().size() - 2 * t.adapted_layers().size(), CheckpointError,
             "checkpoint '", ck.dir, "' holds buffers, which a Llama-family model does not have");
  check_hf_checkpoint(ck.config, t);
  std::vector<OutTensor> out;
  for (const TensorInfo& i : t.tensors()) {
    out.push_back({i.name, i.shape, i.numel() * static_cast<int64_t>(c10::elementSize(dtype)), 0});
  }
  return out;
}

// Reads the tensors one after the other into buffers kept from one tensor to the next (an fp32
// one, and one of the export dtype when it differs): a fresh tensor each time would be memory the
// allocator maps, faults in and zeroes per tensor, a third of the export's time. A weight with
// LoRA adapters comes merged, whole, as read_whole gives it.
class TensorReader {
 public:
  TensorReader(const ckpt::CheckpointTensors& t, c10::ScalarType dtype) : dtype_(dtype) {
    for (const std::string& layer : t.adapted_layers()) adapted_.insert(layer + ".weight");
  }
  at::Tensor next(ckpt::CheckpointTensors& t, const OutTensor& out) {
    if (adapted_.count(out.name)) return t.read_whole(out.name).to(dtype_);
    int64_t numel = 1;
    for (int64_t d : out.shape) numel *= d;
    if (!fp32_.defined() || fp32_.numel() < numel) {
      fp32_ = at::Tensor();  // the old buffer goes before the new one comes
      fp32_ = at::empty({numel}, at::kFloat);
    }
    at::Tensor values = fp32_.narrow(0, 0, numel);
    t.read(out.name, 0, numel, values);
    if (dtype_ == at::kFloat) return values.view(out.shape);
    if (!cast_.defined() || cast_.numel() < numel) {
      cast_ = at::Tensor();
      cast_ = at::empty({numel}, dtype_);
    }
    at::Tensor cast = cast_.narrow(0, 0, numel);
    cast.copy_(values);
    return cast.view(out.shape);
  }

 private:
  c10::ScalarType dtype_;
  std::set<std::string> adapted_;
  at::Tensor fp32_, cast_;
};

// This rank's files, one tensor at a time; then the rest of its units' sections, so every
// checksum it relies on has been checked.
void write_files(ckpt::CheckpointTensors& t, const std::vector<OutTensor>& tensors, const std::vector<OutFile>& files,
                 const std::string& dir, int rank, c10::ScalarType dtype, HfExportReport& r) {
  std::set<std::string> units;
  TensorReader reader(t, dtype);
  for (const OutFile& f : files) {
    if (f.rank != rank) continue;
    std::vector<TensorInfo> infos;
    for (size_t i : f.tensors) infos.push_back({tensors[i].name, dtype, tensors[i].shape});
    SafetensorsWriter w(dir + "/" + f.name, infos, {{"format", "pt"}});
    for (size_t i : f.tensors) {
      w.write(tensors[i].name, reader.next(t, tensors[i]));
      units.insert(t.param(tensors[i].name).unit);
      r.bytes_here += tensors[i].bytes;
    }
    w.finish();
    ++r.files_here;
  }
  std::vector<std::string> mine;
  for (const ckpt::SavedParam& p : t.params()) {
    if (units.count(p.unit)) mine.push_back(p.name);
  }
  if (!mine.empty()) t.check_rest(mine);
}

}  // namespace

c10::ScalarType hf_dtype_from_string(const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return c10::kBFloat16;
  if (text == "fp16" || text == "float16") return c10::kHalf;
  if (text == "fp32" || text == "float32") return c10::kFloat;
  ZS_THROW(UsageError, "dtype '", text, "' is not one of bf16, fp16, fp32");
}

int64_t parse_shard_size(const std::string& text) {
  static const std::vector<std::pair<std::string, int64_t>> kUnits = {
      {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20}, {"GiB", int64_t{1} << 30}, {"TiB", int64_t{1} << 40},
      {"KB", 1000},              {"MB", 1000000},           {"GB", 1000000000},      {"TB", 1000000000000}, {"", 1}};
  for (const auto& [unit, scale] : kUnits) {
    if (text.size() <= unit.size() || text.compare(text.size() - unit.size(), unit.size(), unit) != 0) continue;
    const std::string number = text.substr(0, text.size() - unit.size());
    bool digits = !number.empty();
    for (char c : number) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (!digits) break;
    const int64_t n = std::stoll(number);
    if (n > 0 && n <= std::numeric_limits<int64_t>::max() / scale) return n * scale;
    break;
  }
  ZS_THROW(UsageError, "shard size '", text, "' is not a positive size such as 5GB, 500MB, 2GiB or a number of bytes");
}

HfExportReport export_hf_directory(const std::string& ckpt, const std::string& out_dir, const HfExportOptions& o,
                                   Communicator* comm) {
  ZS_REQUIRE(o.max_shard_bytes > 0, UsageError, "the maximum shard size must be positive, got ", o.max_shard_bytes);
  const int rank = comm == nullptr ? 0 : comm->rank(), ranks = comm == nullptr ? 1 : comm->size();
  HfExportReport r;
  r.dir = out_dir;
  std::unique_ptr<ckpt::CheckpointTensors> t;
  LlamaCheckpoint ck;
  std::vector<OutTensor> tensors;
  std::vector<OutFile> files;
  detail::on_every_rank(comm, "exporting '" + ckpt + "'", [&] {
    ck = LlamaCheckpoint::open(ckpt);
    t = std::make_unique<ckpt::CheckpointTensors>(ck.dir, ckpt::CheckpointTensors::Options{o.merge_lora});
    ZS_REQUIRE(o.merge_lora || t->adapted_layers().empty(), CheckpointError, "checkpoint '", ck.dir,
               "' has LoRA adapters on ", t->adapted_layers().size(),
               " layers: merge them into the weights (--merge-lora), or export them as a PEFT adapter (--format peft)");
    r.dtype = o.dtype.value_or(default_dtype(ck.config_json));
    ZS_REQUIRE(r.dtype == c10::kFloat || r.dtype == c10::kBFloat16 || r.dtype == c10::kHalf, UsageError,
               "a Hugging Face export writes bf16, fp16 or fp32, not ", c10::toString(r.dtype));
    tensors = out_tensors(ck, *t, r.dtype);
    assign_ranks(tensors, *t, ranks);
    files = plan_files(tensors, ranks, o.max_shard_bytes);
    for (const OutTensor& x : tensors) r.total_size += x.bytes;
  });
  const detail::ExportDirectory out(out_dir, comm);
  try {
    detail::on_every_rank(comm, "writing '" + out_dir + "'",
                          [&] { write_files(*t, tensors, files, out.tmp(), rank, r.dtype, r); });
    detail::on_every_rank(comm, "completing '" + out_dir + "'", [&] {
      if (rank != 0) return;
      out.write_file("config.json", config_json(ck, r.dtype));
      if (files.size() > 1) out.write_file("model.safetensors.index.json", index_json(tensors, files, r.total_size));
      out.publish();
    });
  } catch (...) {
    if (rank == 0) out.discard();
    throw;
  }
  r.files = static_cast<int>(files.size());
  r.tensors = static_cast<int64_t>(tensors.size());
  r.read_here = t->bytes_read();
  return r;
}

}  // namespace zeroshard::models
