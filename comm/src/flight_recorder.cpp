// SPDX-License-Identifier: Apache-2.0
// FlightRecorder (zeroshard/comm/flight_recorder.h).

#include "zeroshard/comm/flight_recorder.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard {
namespace {

using Json = nlohmann::ordered_json;

// One line of JSON; bytes that are not UTF-8 (in a tag, a reason) become U+FFFD.
std::string line_of(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string record_line(const FlightRecord& r) {
  Json j;
  j["id"] = r.id;
  j["comm"] = r.sig.comm;
  j["seq"] = r.sig.seq;
  j["op"] = to_string(r.sig.kind);
  j["dtype"] = c10::toString(r.sig.dtype);
  j["count"] = r.sig.count;
  j["reduce"] = to_string(r.sig.op);
  j["root"] = r.sig.root;
  j["tag"] = r.sig.tag;
  j["state"] = to_string(r.state);
  j["issued"] = r.issued;
  j["started"] = r.started;
  j["ended"] = r.ended;
  return line_of(j);
}

}  // namespace

const char* to_string(FlightRecord::State state) {
  switch (state) {
    case FlightRecord::State::kIssued: return "issued";
    case FlightRecord::State::kStarted: return "started";
    case FlightRecord::State::kCompleted: return "completed";
    case FlightRecord::State::kFailed: return "failed";
  }
  return "?";
}

FlightRecorder& FlightRecorder::instance() {
  // Never destroyed: collectives may still end during static destruction.
  static FlightRecorder* r = new FlightRecorder();
  return *r;
}

void FlightRecorder::configure(size_t entries, std::string dir, int rank, int world_size) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_.assign(entries, FlightRecord{});
  next_id_ = 1;
  dir_ = std::move(dir);
  rank_ = rank;
  world_size_ = world_size;
  last_failure_dump_ = 0;
  failures_not_written_ = 0;
  capacity_.store(entries, std::memory_order_relaxed);
}

uint64_t FlightRecorder::issued(const CollectiveSignature& sig) {
  if (!enabled()) return 0;
  const double t = now_s();
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return 0;
  const uint64_t id = next_id_++;
  FlightRecord& r = ring_[(id - 1) % ring_.size()];
  r.id = id;
  r.sig = sig;
  r.state = FlightRecord::State::kIssued;
  r.issued = t;
  r.started = r.ended = 0;
  return id;
}

void FlightRecorder::started(uint64_t id) {
  if (id == 0) return;
  const double t = now_s();
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return;
  FlightRecord& r = ring_[(id - 1) % ring_.size()];
  if (r.id != id || r.state != FlightRecord::State::kIssued) return;
  r.state = FlightRecord::State::kStarted;
  r.started = t;
}

void FlightRecorder::ended(uint64_t id, bool ok) {
  if (id == 0) return;
  const double t = now_s();
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return;
  FlightRecord& r = ring_[(id - 1) % ring_.size()];
  if (r.id != id || r.state == FlightRecord::State::kCompleted || r.state == FlightRecord::State::kFailed) return;
  if (r.started == 0) r.started = t;
  r.state = ok ? FlightRecord::State::kCompleted : FlightRecord::State::kFailed;
  r.ended = t;
}

std::vector<FlightRecord> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightRecord> out;
  if (ring_.empty()) return out;
  const uint64_t held = std::min<uint64_t>(next_id_ - 1, ring_.size());
  for (uint64_t id = next_id_ - held; id < next_id_; ++id) out.push_back(ring_[(id - 1) % ring_.size()]);
  return out;
}

std::string FlightRecorder::path() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return "";
  return (std::filesystem::path(dir_.empty() ? "." : dir_) / ("flight-rank" + std::to_string(rank_) + ".jsonl"))
      .string();
}

std::string FlightRecorder::dump_failure(const std::string& reason) noexcept {
  if (!enabled()) return "";
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double t = now_s();
    if (last_failure_dump_ > 0 && t - last_failure_dump_ < kFailureDumpInterval) {
      ++failures_not_written_;
      return "";
    }
    last_failure_dump_ = t;
  }
  return dump(reason);
}

std::string FlightRecorder::dump(const std::string& reason) noexcept {
  try {
    if (!enabled()) return "";
    const std::vector<FlightRecord> records = snapshot();
    const std::string target = path();
    uint64_t recorded = 0;
    int rank = 0, world = 1;
    int64_t not_written = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      recorded = next_id_ - 1;
      rank = rank_;
      world = world_size_;
      not_written = failures_not_written_;
      failures_not_written_ = 0;
    }
    std::filesystem::create_directories(std::filesystem::path(target).parent_path());
    const std::string tmp = target + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      Json head;
      head["flight_recorder"] = 1;
      head["rank"] = rank;
      head["world_size"] = world;
      head["host"] = detail::process_host();
      head["pid"] = static_cast<int64_t>(::getpid());
      head["reason"] = reason;
      head["time"] = now_s();
      head["entries"] = static_cast<int64_t>(capacity_.load());
      head["recorded"] = recorded;
      head["failures_not_written"] = not_written;
      out << line_of(head) << "\n";
      for (const FlightRecord& r : records) out << record_line(r) << "\n";
      out.flush();
      if (!out) {
        ZS_LOG(kError) << "flight recorder: cannot write '" << tmp << "'";
        std::filesystem::remove(tmp);
        return "";
      }
    }
    std::filesystem::rename(tmp, target);
    ZS_LOG(kWarn) << "flight recorder: the last " << records.size() << " collectives written to " << target << " ("
                  << reason << "); zeroshard-trace " << std::filesystem::path(target).parent_path().string()
                  << " compares the ranks' files";
    return target;
  } catch (const std::exception& e) {
    ZS_LOG(kError) << "flight recorder: the dump failed: " << e.what();
  } catch (...) {
    ZS_LOG(kError) << "flight recorder: the dump failed";
  }
  return "";
}

}  // namespace zeroshard
