// SPDX-License-Identifier: Apache-2.0
// FaultInjectingIo (fault_io.h): decides each request's fault at submit, forwards the part that
// is to succeed, and raises the injected error in wait().

#include "zeroshard/io/fault_io.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "zeroshard/base/error.h"

namespace zeroshard {

namespace {

const char* const kInjected = " (injected by FaultInjectingIo)";

int64_t round_for(const AioFile& file, int64_t bytes) {
  return file.direct() ? bytes / kDirectAlignment * kDirectAlignment : bytes;
}

}  // namespace

FaultInjectingIo::FaultInjectingIo(std::unique_ptr<IoEngine> inner) : inner_(std::move(inner)) {
  ZS_REQUIRE(inner_ != nullptr, UsageError, "FaultInjectingIo: no engine to wrap");
}

FaultInjectingIo::~FaultInjectingIo() = default;  // the inner engine drains its own requests

void FaultInjectingIo::fail_writes_after_bytes(int64_t bytes, int err) {
  ZS_REQUIRE(bytes >= 0 && err > 0, UsageError, "FaultInjectingIo::fail_writes_after_bytes(",
             bytes, ", ", err, "): bytes must be >= 0 and err an errno value > 0");
  std::lock_guard<std::mutex> lock(mu_);
  write_budget_ = bytes;
  budget_err_ = err;
}

void FaultInjectingIo::fail_write_number(int k, int err) {
  ZS_REQUIRE(k >= 1 && err > 0, UsageError, "FaultInjectingIo::fail_write_number(", k, ", ", err,
             "): k must be >= 1 and err an errno value > 0");
  std::lock_guard<std::mutex> lock(mu_);
  write_countdown_ = k;
  write_number_err_ = err;
}

void FaultInjectingIo::fail_reads(int err) {
  ZS_REQUIRE(err > 0, UsageError, "FaultInjectingIo::fail_reads(", err, "): not an errno value");
  std::lock_guard<std::mutex> lock(mu_);
  read_err_ = err;
}

void FaultInjectingIo::fail_read_number(int k, int err) {
  ZS_REQUIRE(k >= 1 && err > 0, UsageError, "FaultInjectingIo::fail_read_number(", k, ", ", err,
             "): k must be >= 1 and err an errno value > 0");
  std::lock_guard<std::mutex> lock(mu_);
  read_countdown_ = k;
  read_number_err_ = err;
}

void FaultInjectingIo::short_reads(int64_t bytes) {
  ZS_REQUIRE(bytes >= 0, UsageError, "FaultInjectingIo::short_reads(", bytes, "): must be >= 0");
  std::lock_guard<std::mutex> lock(mu_);
  short_read_bytes_ = bytes;
}

void FaultInjectingIo::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  write_budget_ = -1;
  write_countdown_ = read_countdown_ = 0;
  read_err_ = 0;
  short_read_bytes_ = -1;
}

int64_t FaultInjectingIo::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

IoEngine::Handle FaultInjectingIo::submit_write(AioFile& file, const void* buf, int64_t bytes,
                                                int64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  Request r;
  r.file = &file;
  r.write = true;
  r.bytes = r.allowed = bytes;
  r.offset = offset;
  if (write_countdown_ > 0 && --write_countdown_ == 0) {
    r.err = write_number_err_;
    r.allowed = 0;
  } else if (write_budget_ >= 0 && bytes > write_budget_) {
    r.err = budget_err_;
    r.allowed = round_for(file, write_budget_);
    write_budget_ = 0;
  } else if (write_budget_ >= 0) {
    write_budget_ -= bytes;
  }
  return add(r, buf);
}

IoEngine::Handle FaultInjectingIo::submit_read(AioFile& file, void* buf, int64_t bytes,
                                               int64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  Request r;
  r.file = &file;
  r.bytes = r.allowed = bytes;
  r.offset = offset;
  if (read_countdown_ > 0 && --read_countdown_ == 0) {
    r.err = read_number_err_;
    r.allowed = 0;
  } else if (read_err_ != 0) {
    r.err = read_err_;
    r.allowed = 0;
  } else if (short_read_bytes_ >= 0 && bytes > short_read_bytes_) {
    r.short_read = true;
    r.allowed = round_for(file, short_read_bytes_);
  }
  return add(r, buf);
}

IoEngine::Handle FaultInjectingIo::add(Request r, const void* buf) {
  if (r.allowed > 0 || (r.err == 0 && !r.short_read)) {
    r.inner = r.write ? inner_->submit_write(*r.file, buf, r.allowed, r.offset)
                      : inner_->submit_read(*r.file, const_cast<void*>(buf), r.allowed, r.offset);
    r.has_inner = true;
  }
  if (r.err != 0 || r.short_read) ++injected_;
  const Handle h = next_++;
  requests_.emplace(h, r);
  return h;
}

void FaultInjectingIo::finish(const Request& r) {
  if (r.has_inner) inner_->wait(r.inner);  // a real failure of the forwarded part comes first
  if (r.err != 0) {
    ZS_THROW(IoError, io_failure_message(*r.file, r.write, r.bytes - r.allowed,
                                         r.offset + r.allowed, r.err),
             kInjected);
  }
  if (r.short_read) {
    ZS_THROW(IoError, short_read_message(*r.file, r.allowed, r.bytes, r.offset), kInjected);
  }
}

void FaultInjectingIo::wait(Handle h) {
  Request r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = requests_.find(h);
    ZS_REQUIRE(it != requests_.end(), UsageError, "FaultInjectingIo::wait(", h,
               "): no such request (not submitted to this engine, or already waited)");
    r = it->second;
    requests_.erase(it);
  }
  finish(r);
}

void FaultInjectingIo::wait_all() {
  std::vector<std::pair<Handle, Request>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.assign(requests_.begin(), requests_.end());
    requests_.clear();
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::exception_ptr first;
  for (const auto& [h, r] : all) {
    try {
      finish(r);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace zeroshard
