// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/core/memory_report.h"

#include <c10/util/Exception.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cuda_memory.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"

namespace zeroshard {
namespace {

constexpr double kMiB = 1048576.0;
constexpr int kWidth = 88;  // characters of a summary line

std::mutex g_mutex;  // guards everything below
std::map<int, std::pair<std::string, MemoryRowsFn>>& sources() {
  static std::map<int, std::pair<std::string, MemoryRowsFn>> m;
  return m;
}
int g_next_handle = 1;
MemoryReportOptions g_options;
std::string g_limit_source;  // MemoryOptions::limit_source, for the summary
int64_t g_limit_bytes = 0;

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f MiB", bytes / kMiB);
  return b;
}

std::string count(int64_t n) { return std::to_string(n); }

std::string phase_name(int phase) {
  const std::string& label = memory_phase_label(phase);
  return label.empty() ? std::string("(no phase)") : label;
}

std::string rule(char c) { return "|" + std::string(kWidth - 2, c) + "|\n"; }

std::string centered(const std::string& text) {
  const int inner = kWidth - 2;
  const int len = static_cast<int>(text.size());
  if (len >= inner) return "|" + text + "|\n";
  const int left = (inner - len) / 2;
  return "|" + std::string(left, ' ') + text + std::string(inner - len - left, ' ') + "|\n";
}

// `text` left-aligned, wrapped at spaces onto as many lines as it needs.
std::string left(const std::string& text) {
  const size_t inner = kWidth - 4;
  std::string out, rest = text;
  while (true) {
    size_t cut = rest.size();
    if (cut > inner) {
      cut = rest.rfind(' ', inner);
      if (cut == std::string::npos || cut == 0) cut = inner;
    }
    const std::string line = rest.substr(0, cut);
    out += "| " + line + std::string(inner - line.size(), ' ') + " |\n";
    if (cut >= rest.size()) return out;
    rest = rest.substr(rest[cut] == ' ' ? cut + 1 : cut);
  }
}

std::string row(const std::string& a, const std::string& b, const std::string& c, const std::string& d = "",
                const std::string& e = "") {
  char line[256];
  std::snprintf(line, sizeof(line), "| %-26.26s | %12s | %12s | %12s | %12s |\n", a.c_str(), b.c_str(), c.c_str(),
                d.c_str(), e.c_str());
  return line;
}

bool on_cuda(const MemoryReportOptions& o) { return o.device.is_cuda(); }

std::vector<std::pair<std::string, std::vector<MemoryRow>>> collect_sources() {
  std::vector<std::pair<std::string, MemoryRowsFn>> fns;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const auto& [h, s] : sources()) fns.push_back(s);
  }
  std::vector<std::pair<std::string, std::vector<MemoryRow>>> out;
  for (auto& [title, fn] : fns) out.emplace_back(title, fn());
  return out;
}

// What the compute device's allocator holds now, when known.
bool device_allocated(const MemoryReportOptions& o, int64_t* bytes) {
  if (on_cuda(o)) {
    const auto s = detail::cuda_allocator_stats(o.device.index());
    *bytes = s.allocated_current;
    return s.available;
  }
  *bytes = host_memory_stats().current;
  return host_memory_tracking_installed();
}

// The report taken when an allocation failed, before the stack unwound and freed what was live.
struct Captured {
  bool valid = false;
  std::string phase, summary, largest, snapshot;
};
std::mutex g_capture_mutex;
Captured g_captured;

std::string phase_at_failure() {
  const HostRefusal refusal = last_host_refusal();
  return phase_name(refusal.happened ? refusal.phase : last_memory_phase());
}

void capture_report() {
  std::unique_lock<std::mutex> lock(g_capture_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is taking it
  try {
    const MemoryReportOptions o = memory_report_options();
    Captured c;
    c.phase = phase_at_failure();
    c.summary = memory_summary();
    if (o.top_allocations > 0) c.largest = largest_allocations_table(static_cast<size_t>(o.top_allocations));
    const HostRefusal r = last_host_refusal();
    c.snapshot = memory_snapshot(r.happened ? r.reason : "the CUDA caching allocator ran out of memory");
    c.valid = true;
    g_captured = std::move(c);
  } catch (...) {
    // Out of memory for the report itself: the handler reports what it can later.
  }
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    ZS_THROW(IoError, "cannot create the memory snapshot '", tmp, "': ", detail::errno_string(errno));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  const int close_errno = errno;
  if (!written || !closed) {
    ::unlink(tmp.c_str());
    ZS_THROW(IoError, "cannot write the memory snapshot '", tmp, "': ",
             detail::errno_string(written ? close_errno : write_errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    ZS_THROW(IoError, "cannot rename the memory snapshot to '", path, "': ", detail::errno_string(e));
  }
}

std::string error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return std::string("std::bad_alloc (the C++ heap could not satisfy an allocation): ") + e.what();
  }
  return e.what();
}

}  // namespace

int add_memory_source(const std::string& title, MemoryRowsFn rows) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int h = g_next_handle++;
  sources()[h] = {title, std::move(rows)};
  return h;
}

void remove_memory_source(int handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  sources().erase(handle);
}

void set_memory_report_options(const MemoryReportOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_options = options;
}

MemoryReportOptions memory_report_options() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_options;
}

void apply_memory_options(const MemoryOptions& options, c10::Device device, int rank, int world_size) {
  ZS_REQUIRE(options.host_cache_mib >= 0 && options.host_cache_mib <= 1048576, ConfigError,
             "memory.host_cache_mib = ", options.host_cache_mib,
             " is out of range [0, 1048576] (MemoryOptions.host_cache_mib, in MiB)");
  const std::string& dir = options.snapshot_dir;
  if (!dir.empty()) {
    struct stat st {};
    ZS_REQUIRE(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), ConfigError, "memory.snapshot_dir = '",
               dir, "' is not an existing directory (MemoryOptions.snapshot_dir)");
    ZS_REQUIRE(::access(dir.c_str(), W_OK) == 0, ConfigError, "memory.snapshot_dir = '", dir,
               "' is not writable by this process (MemoryOptions.snapshot_dir): ", detail::errno_string(errno));
  }
  MemoryReportOptions o;
  o.snapshot_dir = dir;
  o.top_allocations = options.top_allocations;
  o.device = device;
  o.rank = rank;
  o.world_size = world_size;
  set_memory_report_options(o);
  set_host_refusal_observer(&capture_report);
  // On CUDA the Session has made the device current and initialised LibTorch's allocator first
  // (the observer attaches to the allocators that exist).
  if (device.is_cuda()) detail::set_cuda_oom_observer(&capture_report);
  const int64_t limit = options.limit_mib * 1048576;
  if (options.track_allocations || options.host_cache_mib > 0 || (limit > 0 && device.is_cpu())) {
    install_host_memory_tracking();
  }
  set_host_memory_cache_limit(options.host_cache_mib * 1048576,
                              "memory.host_cache_mib = " + std::to_string(options.host_cache_mib));
  if (limit <= 0) return;
  const std::string source = options.limit_source.empty()
                                 ? "MemoryOptions.limit_mib = " + std::to_string(options.limit_mib)
                                 : options.limit_source;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_limit_source = source;
    g_limit_bytes = limit;
  }
  if (device.is_cuda()) {
    detail::set_cuda_memory_limit(device.index(), limit, source);
  } else {
    ZS_REQUIRE(host_memory_tracking_installed(), ConfigError, source,
               " cannot be enforced: LibTorch's CPU allocator here frees by context, so zeroshard cannot wrap it");
    set_host_memory_limit(limit, source);
  }
}

DeviceMemoryUse device_memory_use() {
  const MemoryReportOptions o = memory_report_options();
  DeviceMemoryUse u;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    u.limit = g_limit_bytes;
  }
  if (on_cuda(o)) {
    const auto c = detail::cuda_allocator_stats(o.device.index());
    u.known = c.available;
    u.current = c.allocated_current;
    u.peak = c.allocated_peak;
  } else {
    const HostMemoryStats h = host_memory_stats();
    u.known = host_memory_tracking_installed();
    u.current = h.current;
    u.peak = h.peak;
  }
  return u;
}

namespace {

// The summary's header: the process, the host allocator and the device's allocator.
void summary_header(std::ostringstream& os, const MemoryReportOptions& o, const detail::CudaAllocatorStats& c) {
  std::string limit_source;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    limit_source = g_limit_source;
  }
  os << rule('=');
  os << centered("zeroshard memory summary: rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size) +
                 " (" + detail::process_host() + "), device " + o.device.str());
  os << rule('-');
  const HostMemoryStats h = host_memory_stats();
  std::string host_line = "host: LibTorch CPU allocator, ";
  host_line += host_memory_tracking_installed() ? "tracked" : "not tracked (memory.track_allocations is false)";
  if (h.limit > 0) {
    const std::string src = host_memory_limit_source();
    host_line += "; limit " + mib(h.limit) + (src.empty() ? "" : " (" + src + ")");
  }
  if (h.refused > 0) host_line += "; refused allocations: " + count(h.refused);
  if (h.cache_limit > 0) {
    host_line += "; block cache of " + mib(h.cache_limit) + " (" + count(h.cache_hits) + " reuses)";
  }
  os << left(host_line);
  if (c.available) {
    std::string l = "cuda:" + std::to_string(o.device.index()) + ": CUDA caching allocator, device memory " +
                    mib(c.device_total) + "; OOMs " + count(c.num_ooms) + ", cudaMalloc retries " +
                    count(c.num_alloc_retries);
    if (!limit_source.empty()) l += "; limit " + limit_source;
    os << left(l);
  }
}

// The allocators' totals: host (when tracked) and CUDA.
void summary_allocators(std::ostringstream& os, const detail::CudaAllocatorStats& c) {
  os << rule('=');
  os << row("Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
  os << rule('-');
  if (host_memory_tracking_installed()) {
    const HostMemoryStats h = host_memory_stats();
    os << row("Host allocated memory", mib(h.current), mib(h.peak), mib(h.allocated_total), mib(h.freed_total));
    if (h.cache_limit > 0) os << row("Host cached free blocks", mib(h.cached), "");
    os << row("Host allocations", count(h.allocations), "", count(h.allocations_total),
              count(h.allocations_total - h.allocations));
  }
  if (c.available) {
    os << row("CUDA allocated memory", mib(c.allocated_current), mib(c.allocated_peak), mib(c.allocated_total),
              mib(c.freed_total));
    os << row("CUDA active memory", mib(c.active_current), mib(c.active_peak));
    os << row("CUDA reserved memory", mib(c.reserved_current), mib(c.reserved_peak));
    os << row("CUDA allocations", count(c.allocations_current), "", count(c.allocations_total),
              count(c.allocations_total - c.allocations_current));
  }
}

// Every source's categories (on-disk ones last). Returns the bytes of those in the device's allocator.
int64_t summary_categories(std::ostringstream& os) {
  int64_t in_allocator = 0;
  for (const auto& [title, rows] : collect_sources()) {
    os << rule('-');
    os << row(title, "Cur Usage", "Peak Usage");
    std::vector<const MemoryRow*> disk;
    for (const MemoryRow& r : rows) {
      if (r.on_disk) {
        disk.push_back(&r);
        continue;
      }
      os << row(r.name + (r.in_device_allocator ? "" : " *"), mib(r.current), mib(r.peak));
      if (r.in_device_allocator) in_allocator += r.current;
    }
    for (const MemoryRow* r : disk) os << row(r->name, mib(r->current), mib(r->peak));
  }
  return in_allocator;
}

}  // namespace

std::string memory_summary() {
  const MemoryReportOptions o = memory_report_options();
  detail::CudaAllocatorStats c;
  if (on_cuda(o)) c = detail::cuda_allocator_stats(o.device.index());
  std::ostringstream os;
  summary_header(os, o, c);
  summary_allocators(os, c);
  const int64_t in_allocator = summary_categories(os);
  int64_t allocated = 0;
  if (device_allocated(o, &allocated)) {
    os << rule('-');
    os << row("activations and other", mib(std::max<int64_t>(0, allocated - in_allocator)), "");
    os << left("activations and other = the " + std::string(on_cuda(o) ? "CUDA" : "host") +
               " allocator's bytes beyond the categories above");
  }
  os << left("* outside the device allocator (pinned or offloaded host memory)");
  os << rule('=');
  return os.str();
}

std::string largest_allocations_table(size_t n) {
  const MemoryReportOptions o = memory_report_options();
  std::ostringstream os;
  char line[256];
  if (on_cuda(o)) {
    const auto blocks = detail::largest_cuda_blocks(o.device.index(), n);
    os << "Largest allocated CUDA blocks on " << o.device.str() << ":\n";
    std::snprintf(line, sizeof(line), "  %3s %14s %14s %14s  %s\n", "#", "block", "requested", "segment", "pool");
    os << line;
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::snprintf(line, sizeof(line), "  %3zu %14s %14s %14s  %s\n", i + 1, mib(blocks[i].bytes).c_str(),
                    mib(blocks[i].requested).c_str(), mib(blocks[i].segment).c_str(),
                    blocks[i].large_pool ? "large" : "small");
      os << line;
    }
  }
  if (!host_memory_tracking_installed()) {
    os << "Largest live host allocations: not recorded (memory.track_allocations is false)\n";
    return os.str();
  }
  const auto largest = largest_host_allocations(n);
  const HostMemoryStats h = host_memory_stats();
  os << "Largest live host allocations (" << largest.size() << " of " << h.allocations << ", " << mib(h.current)
     << "):\n";
  std::snprintf(line, sizeof(line), "  %3s %14s %10s  %s\n", "#", "size", "sequence", "allocated during");
  os << line;
  for (size_t i = 0; i < largest.size(); ++i) {
    std::snprintf(line, sizeof(line), "  %3zu %14s %10llu  %s\n", i + 1, mib(largest[i].bytes).c_str(),
                  static_cast<unsigned long long>(largest[i].sequence), phase_name(largest[i].phase).c_str());
    os << line;
  }
  const auto phases = host_allocations_by_phase();
  os << "Live host memory by phase:\n";
  for (size_t i = 0; i < phases.size() && i < std::max<size_t>(n, 5); ++i) {
    std::snprintf(line, sizeof(line), "  %14s in %6lld allocation(s)  %s\n", mib(phases[i].bytes).c_str(),
                  static_cast<long long>(phases[i].count), phase_name(phases[i].phase).c_str());
    os << line;
  }
  return os.str();
}

namespace {

using Json = nlohmann::ordered_json;

Json host_allocator_json() {
  const HostMemoryStats h = host_memory_stats();
  Json host;
  host["tracked"] = host_memory_tracking_installed();
  host["current"] = h.current;
  host["peak"] = h.peak;
  host["allocated_total"] = h.allocated_total;
  host["freed_total"] = h.freed_total;
  host["allocations"] = h.allocations;
  host["allocations_total"] = h.allocations_total;
  host["limit"] = h.limit;
  host["refused"] = h.refused;
  return host;
}

Json refusal_json(const HostRefusal& refusal) {
  Json r;
  r["requested"] = refusal.requested;
  r["in_use"] = refusal.in_use;
  r["limit"] = refusal.limit;
  r["phase"] = phase_name(refusal.phase);
  r["reason"] = refusal.reason;
  return r;
}

// The CUDA caching allocator's counters and its largest blocks (nothing where it has none).
void add_cuda_allocator(Json& snap, int device) {
  const auto c = detail::cuda_allocator_stats(device);
  if (!c.available) return;
  Json j;
  j["allocated"] = c.allocated_current;
  j["allocated_peak"] = c.allocated_peak;
  j["reserved"] = c.reserved_current;
  j["reserved_peak"] = c.reserved_peak;
  j["active"] = c.active_current;
  j["num_ooms"] = c.num_ooms;
  j["num_alloc_retries"] = c.num_alloc_retries;
  j["device_total"] = c.device_total;
  snap["cuda_allocator"] = std::move(j);
  Json blocks = Json::array();
  for (const auto& b : detail::largest_cuda_blocks(device, 1000)) {
    blocks.push_back({{"bytes", b.bytes}, {"requested", b.requested}, {"segment", b.segment},
                      {"large_pool", b.large_pool}});
  }
  snap["cuda_blocks"] = std::move(blocks);
}

Json categories_json() {
  Json categories = Json::array();
  for (const auto& [title, rows] : collect_sources()) {
    for (const MemoryRow& r : rows) {
      categories.push_back({{"source", title},
                            {"name", r.name},
                            {"current", r.current},
                            {"peak", r.peak},
                            {"in_device_allocator", r.in_device_allocator},
                            {"on_disk", r.on_disk}});
    }
  }
  return categories;
}

// Host allocations by phase, and the largest live ones.
void add_host_allocations(Json& snap) {
  Json phases = Json::array();
  for (const auto& p : host_allocations_by_phase()) {
    phases.push_back({{"phase", phase_name(p.phase)}, {"bytes", p.bytes}, {"count", p.count}});
  }
  snap["host_by_phase"] = std::move(phases);
  Json largest = Json::array();
  for (const auto& a : largest_host_allocations(1000)) {
    largest.push_back({{"bytes", a.bytes}, {"phase", phase_name(a.phase)}, {"sequence", a.sequence}});
  }
  snap["host_largest"] = std::move(largest);
}

}  // namespace

std::string memory_snapshot(const std::string& error) {
  const MemoryReportOptions o = memory_report_options();
  Json snap;
  snap["format"] = "zeroshard-memory-snapshot";
  snap["version"] = 1;
  snap["rank"] = o.rank;
  snap["world_size"] = o.world_size;
  snap["host"] = detail::process_host();
  snap["device"] = o.device.str();
  snap["error"] = error;
  const HostRefusal refusal = last_host_refusal();
  snap["phase"] = phase_name(refusal.happened ? refusal.phase : last_memory_phase());
  snap["host_allocator"] = host_allocator_json();
  if (refusal.happened) snap["refused"] = refusal_json(refusal);
  if (on_cuda(o)) add_cuda_allocator(snap, o.device.index());
  snap["categories"] = categories_json();
  add_host_allocations(snap);
  // Bytes that are not UTF-8 (in an error message, a path) become U+FFFD: the snapshot stays JSON.
  return snap.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void write_memory_snapshot(const std::string& path, const std::string& error) {
  write_text_atomically(path, memory_snapshot(error) + "\n");
}

std::string default_snapshot_path() {
  const MemoryReportOptions o = memory_report_options();
  const std::string dir = o.snapshot_dir.empty() ? std::string(".") : o.snapshot_dir;
  return dir + "/zeroshard-oom-rank" + std::to_string(o.rank) + ".json";
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  return last_host_refusal().happened;
}

std::string out_of_memory_report(const std::exception& e) {
  const MemoryReportOptions o = memory_report_options();
  const std::string what = error_text(e);
  Captured c;
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    c = g_captured;
  }
  std::ostringstream os;
  os << "zeroshard: out of memory on rank " << o.rank << " of " << o.world_size << " (" << detail::process_host()
     << "), device " << o.device.str() << ", during " << (c.valid ? c.phase : phase_at_failure()) << ":\n  " << what
     << "\n";
  try {
    if (c.valid) {
      os << "Memory when the allocation failed:\n" << c.summary << c.largest;
    } else {  // no allocator hook saw it (std::bad_alloc): what is left after unwinding
      c.snapshot = memory_snapshot(what);
      os << "Memory after the failed step was unwound (no allocator hook saw the failure, so the "
            "allocations of the failed step are gone; the peaks still show it):\n"
         << memory_summary();
      if (o.top_allocations > 0) os << largest_allocations_table(static_cast<size_t>(o.top_allocations));
    }
  } catch (const std::exception& inner) {
    os << "(the memory summary failed too: " << inner.what() << ")\n";
  }
  const std::string path = default_snapshot_path();
  try {
    write_text_atomically(path, c.snapshot + "\n");
    os << "Memory snapshot (JSON): " << path << "\n";
  } catch (const std::exception& inner) {
    os << "No memory snapshot: " << error_text(inner) << "\n";
  }
  os << "What to try: a smaller per-rank batch (zeroshard-launch --find-batch-size finds the largest that fits, "
        "--auto-micro-batches splits train.batch_size into micro-batches that fit), "
        "activation_checkpointing.enabled=true, sharding.strategy=FULL_SHARD, offload.optimizer=CPU or NVME; "
        "zeroshard-estimate predicts the model-state memory per rank. Exit status "
     << kOutOfMemoryExitCode << ".";
  return os.str();
}

}  // namespace zeroshard
