// SPDX-License-Identifier: Apache-2.0
// load_pretrained (pretrained.h): match the file's tensors to the model's parameters and buffers,
// check them (strict) or note what does not fit, then read each rank's shard ranges.

#include "zeroshard/checkpoint/pretrained.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <memory>
#include <set>
#include <sstream>

#include "pretrained_rename.h"
#include "sections.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/flat_shard.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/formats/tensor_dir.h"

namespace zeroshard {
namespace {

using detail::shape_str;

// One model tensor to fill: a parameter (a slot of a flat parameter, under all its tied names)
// or a buffer.
struct Target {
  std::vector<std::string> names;  // the first is the qualified name
  std::vector<int64_t> shape;
  FlatShard* flat = nullptr;  // parameter: its flat parameter and place in it
  int64_t offset = 0;
  at::Tensor buffer;          // buffer
  std::string source;         // the file tensor it is read from ("" when absent)
};

struct Match {
  std::vector<Target> targets;
  std::vector<std::string> missing, unexpected, mismatched, conflicting;
  std::vector<std::string> not_required;  // missing, but PretrainedOptions::not_required allows it
};

std::vector<Target> model_targets(ShardingEngine& engine) {
  std::vector<Target> out;
  for (FlatShard* f : engine.flat_shards()) {
    for (const ParamSlot& s : f->slots()) {
      Target t;
      t.names.push_back(s.name);
      t.names.insert(t.names.end(), s.aliases.begin(), s.aliases.end());
      t.shape = s.shape;
      t.flat = f;
      t.offset = s.offset;
      out.push_back(std::move(t));
    }
  }
  for (const auto& b : engine.model().named_buffers()) {
    Target t;
    t.names.push_back(b.key());
    t.shape = b.value().sizes().vec();
    t.buffer = b.value();
    out.push_back(std::move(t));
  }
  return out;
}

// Pairs every model tensor with the file tensor it is read from; what does not pair up goes to
// the match's lists.
Match match(ShardingEngine& engine, const TensorFile& file, const PretrainedOptions& o) {
  Match m;
  m.targets = model_targets(engine);
  const detail::NameMapper mapper(o);
  std::map<std::string, std::string> by_model_name;  // mapped name -> file name
  for (const TensorInfo& t : file.tensors()) {
    std::string rule;
    const std::string name = mapper.map(t.name, &rule);
    auto [it, fresh] = by_model_name.emplace(name, t.name);
    ZS_REQUIRE(fresh, CheckpointError, "pretrained weights '", file.path(), "': '", it->second, "' and '", t.name,
               "' both become model name '", name, "'",
               rule.empty() ? std::string(" (after strip_prefix, add_prefix and rename)")
                            : " (the second by rename pattern '" + rule + "')");
  }
  const std::map<std::string, std::string> file_aliases = file.aliases();
  auto root = [&](const std::string& file_name) {
    auto it = file_aliases.find(file_name);
    return it == file_aliases.end() ? file_name : it->second;
  };
  std::set<std::string> used;  // file names consumed
  for (Target& t : m.targets) {
    std::vector<std::string> found;
    for (const std::string& n : t.names) {
      auto it = by_model_name.find(n);
      if (it != by_model_name.end()) found.push_back(it->second);
    }
    if (found.empty()) {
      bool required = true;
      for (const std::string& pattern : o.not_required) required = required && !glob_match(pattern, t.names.front());
      (required ? m.missing : m.not_required).push_back(t.names.front() + " " + shape_str(t.shape));
      continue;
    }
    for (const std::string& f : found) {
      used.insert(f);
      if (root(f) != root(found.front())) {
        m.conflicting.push_back(t.names.front() + ": the model ties it, the file holds '" + found.front() + "' and '" + f +
                                "' as separate tensors");
      }
    }
    const TensorInfo* info = file.find(found.front());
    if (info->shape != t.shape) {
      m.mismatched.push_back(t.names.front() + ": file " + shape_str(info->shape) + ", model " + shape_str(t.shape));
      continue;
    }
    t.source = found.front();
  }
  for (const TensorInfo& t : file.tensors()) {
    if (!used.count(t.name)) m.unexpected.push_back(mapper.map(t.name) + " " + shape_str(t.shape));
  }
  return m;
}

std::string first_few(const std::vector<std::string>& items, size_t n = 5) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < n; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > n) out += "; ... (" + std::to_string(items.size() - n) + " more)";
  return out;
}

void check_strict(const Match& m, const std::string& path) {
  if (m.missing.empty() && m.unexpected.empty() && m.mismatched.empty() && m.conflicting.empty()) return;
  std::ostringstream os;
  os << "pretrained weights '" << path << "' do not fit the model:";
  if (!m.missing.empty()) os << " " << m.missing.size() << " missing from the file (" << first_few(m.missing) << ");";
  if (!m.unexpected.empty()) {
    os << " " << m.unexpected.size() << " not in the model (" << first_few(m.unexpected) << ");";
  }
  if (!m.mismatched.empty()) os << " " << m.mismatched.size() << " of another shape (" << first_few(m.mismatched) << ");";
  if (!m.conflicting.empty()) os << " " << first_few(m.conflicting) << ";";
  os << " names are matched after model.init_strip_prefix, init_add_prefix and init_rename; "
        "model.init_strict=false loads what matches";
  ZS_THROW(CheckpointError, os.str());
}

// This rank's part of parameter `t`: the elements of its slot that fall into the rank's shard of
// the flat parameter, read straight into the fp32 master shard.
int64_t load_param_part(const Target& t, TensorFile& file) {
  FlatShard& f = *t.flat;
  const int64_t numel = [&] {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return n;
  }();
  const int64_t lo = f.shard_begin();
  const int64_t hi = lo + f.shard_numel();
  const int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + numel);
  if (a >= b) return 0;
  at::Tensor dst = f.shard().narrow(0, a - lo, b - a);
  if (dst.device().is_cpu()) {
    file.read(t.source, a - t.offset, b - a, dst);
  } else {
    at::Tensor host = at::empty({b - a}, at::kFloat);
    file.read(t.source, a - t.offset, b - a, host);
    dst.copy_(host);
  }
  return b - a;
}

// Buffers are whole on every rank.
int64_t load_buffer(const Target& t, TensorFile& file) {
  const int64_t n = t.buffer.numel();
  at::Tensor host = at::empty({n}, t.buffer.options().device(at::kCPU));
  file.read(t.source, 0, n, host);
  t.buffer.copy_(host.view(t.buffer.sizes()));
  return n;
}

PretrainedReport load_local(ShardingEngine& engine, const TensorFileOpener& open, const PretrainedOptions& o) {
  at::NoGradGuard no_grad;
  std::unique_ptr<TensorFile> file = open();
  const std::string path = file->path();
  Match m = match(engine, *file, o);
  if (o.strict) check_strict(m, path);
  PretrainedReport r;
  r.path = path;
  r.format = file->format();
  // Targets come flat by flat: an offloaded shard is loaded once, filled, and written back when
  // the next flat starts, so at most one is resident.
  FlatShard* resident = nullptr;
  for (const Target& t : m.targets) {
    if (t.source.empty()) continue;
    if (resident != nullptr && t.flat != resident) resident->release_shard();
    if (t.flat != nullptr) {
      resident = t.flat;
      t.flat->mark_values_replaced();  // an offloaded optimizer's master follows at the next step
    }
    r.elements_read += t.flat != nullptr ? load_param_part(t, *file) : load_buffer(t, *file);
    ++r.tensors_loaded;
  }
  if (resident != nullptr) resident->release_shard();
  // Gathered copies hold the old values: every unit gathers again at its next forward.
  for (FlatShard* f : engine.flat_shards()) f->free_gathered();
  r.bytes_read = file->bytes_read();
  r.missing = std::move(m.missing);
  r.missing.insert(r.missing.end(), m.not_required.begin(), m.not_required.end());
  r.unexpected = std::move(m.unexpected);
  r.mismatched = std::move(m.mismatched);
  r.mismatched.insert(r.mismatched.end(), m.conflicting.begin(), m.conflicting.end());
  return r;
}

}  // namespace

std::string PretrainedReport::summary() const {
  std::ostringstream os;
  os << "loaded pretrained weights from " << path << " (" << format << "): " << tensors_loaded << " tensors, "
     << elements_read << " elements read on this rank (" << bytes_read << " bytes)";
  if (!missing.empty()) os << "; not in the file, left as initialised: " << first_few(missing);
  if (!unexpected.empty()) os << "; in the file, not in the model: " << first_few(unexpected);
  if (!mismatched.empty()) os << "; skipped: " << first_few(mismatched);
  return os.str();
}

PretrainedReport load_pretrained(ShardingEngine& engine, const std::string& path, const PretrainedOptions& options) {
  return load_pretrained(engine, [&path] { return open_tensor_path(path); }, options);  // a file or a model directory
}

PretrainedReport load_pretrained(ShardingEngine& engine, const TensorFileOpener& open, const PretrainedOptions& options) {
  for (FlatShard* f : engine.flat_shards()) {
    ZS_REQUIRE(!f->gradients_pending(), UsageError, "load_pretrained with gradients of unit '",
               f->name(), "' still pending: load between optimizer steps");
  }
  Communicator& world = *engine.session().world();
  PretrainedReport report;
  const detail::StepOutcome step = detail::run_step(world, true, "zs.pretrained",
                                                    [&] { report = load_local(engine, open, options); });
  if (step.any_failed()) {
    const std::string what = detail::first_error(world, step, "zs.pretrained.error");
    ZS_THROW(CheckpointError, "loading pretrained weights failed on rank(s) ", step.failed_ranks(), ": ",
             step.error.empty() ? what : step.error);
  }
  ZS_LOG(kInfo) << report.summary();
  return report;
}

}  // namespace zeroshard
