// SPDX-License-Identifier: Apache-2.0
#pragma once
// FaultInjectingIo: an IoEngine that forwards to another engine and makes chosen requests fail the
// way a real disk would, for tests of the code above the engine (swapper, checkpoints) and for
// drills. Injected failures are IoErrors with the engine's own texts (io_failure_message,
// short_read_message) plus " (injected by FaultInjectingIo)".
//
//   auto io = std::make_unique<FaultInjectingIo>(make_io_engine({}));
//   io->fail_writes_after_bytes(64 << 20);   // the disk fills up after 64 MiB more
//   ...                                      // the write crossing it: "disk full: write of ..."
//
// Faults apply to requests submitted after they are set, in submission order. A write or read cut
// short by a fault transfers the part before the fault for real (rounded down to kDirectAlignment
// on O_DIRECT files); a request failed outright never reaches the inner engine.
// Thread-safety: as IoEngine (submit/wait from any threads; fault setters too).

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "zeroshard/io/aio.h"

namespace zeroshard {

class FaultInjectingIo final : public IoEngine {
 public:
  explicit FaultInjectingIo(std::unique_ptr<IoEngine> inner);
  ~FaultInjectingIo() override;

  // Writes succeed for `bytes` more bytes; the write crossing the limit writes up to it and fails
  // with `err` at the first byte beyond, and every later write fails (a full disk stays full
  // until clear()).
  void fail_writes_after_bytes(int64_t bytes, int err = ENOSPC);
  // The k-th write submitted from now (k >= 1) fails with `err`, writing nothing.
  void fail_write_number(int k, int err = EIO);
  // Every read from now fails with `err`, reading nothing.
  void fail_reads(int err = EIO);
  // The k-th read submitted from now (k >= 1) fails with `err`, reading nothing.
  void fail_read_number(int k, int err = EIO);
  // Reads longer than `bytes` read only the first `bytes` and then fail as reading a truncated
  // file does ("file ... is shorter than expected: read N of M bytes at offset X").
  void short_reads(int64_t bytes);
  // Removes every fault (requests already submitted keep theirs).
  void clear();
  // Requests failed or cut short by a fault so far.
  int64_t injected() const;
  IoEngine& inner() { return *inner_; }

  Handle submit_read(AioFile& file, void* buf, int64_t bytes, int64_t offset) override;
  Handle submit_write(AioFile& file, const void* buf, int64_t bytes, int64_t offset) override;
  void wait(Handle h) override;
  void wait_all() override;
  IoBackend backend() const override { return inner_->backend(); }
  const IoOptions& options() const override { return inner_->options(); }

 private:
  struct Request {
    AioFile* file = nullptr;
    bool write = false;
    int64_t bytes = 0;
    int64_t offset = 0;
    bool has_inner = false;
    Handle inner = 0;
    int64_t allowed = 0;  // bytes passed to the inner engine
    int err = 0;          // injected errno, or 0
    bool short_read = false;
  };
  Handle add(Request r, const void* buf);
  void finish(const Request& r);

  std::unique_ptr<IoEngine> inner_;
  mutable std::mutex mu_;
  std::unordered_map<Handle, Request> requests_;
  Handle next_ = 1;
  int64_t write_budget_ = -1;  // -1: no limit
  int budget_err_ = 0;
  int write_countdown_ = 0, write_number_err_ = 0;
  int read_countdown_ = 0, read_number_err_ = 0;
  int read_err_ = 0;
  int64_t short_read_bytes_ = -1;  // -1: no limit
  int64_t injected_ = 0;
};

}  // namespace zeroshard
