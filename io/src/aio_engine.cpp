// SPDX-License-Identifier: Apache-2.0
// PieceEngine: request splitting, queue depth, partial transfers, errors and the completion
// thread, shared by the io_uring, libaio and thread-pool backends (aio_engine.h).

#include "aio_engine.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <exception>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard::aio_detail {

namespace {

// A piece the kernel answered with EINTR/EAGAIN is started again at most this often.
constexpr int kMaxRetries = 16;

void check_direct_alignment(const AioFile& file, const char* op, const void* buf, int64_t bytes,
                            int64_t offset) {
  const auto addr = reinterpret_cast<uintptr_t>(buf);
  const char* bad = addr % kDirectAlignment != 0     ? "buffer address"
                    : offset % kDirectAlignment != 0 ? "offset"
                    : bytes % kDirectAlignment != 0  ? "size"
                                                     : nullptr;
  if (bad == nullptr) return;
  ZS_THROW(UsageError, op, " on ", file.path(), " (opened with O_DIRECT): buffer address ", buf,
           ", offset ", offset, " and size ", bytes, " must all be multiples of ", kDirectAlignment,
           "; the ", bad, " is not (use PinnedPool buffers and aligned sizes, or open the file "
           "with direct=false)");
}

}  // namespace

PieceEngine::PieceEngine(const IoOptions& options, IoBackend kind, std::unique_ptr<Backend> backend)
    : options_(options), kind_(kind), backend_(std::move(backend)) {
  pieces_.resize(options_.queue_depth);
  for (int i = options_.queue_depth - 1; i >= 0; --i) {
    pieces_[i].slot = i;
    free_slots_.push_back(i);
  }
  completer_ = std::thread([this] { completion_loop(); });
}

PieceEngine::~PieceEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t dropped = 0;
    for (auto& [h, r] : requests_) {
      if (r.split < r.bytes) ++dropped;
      r.split = r.bytes;  // pieces not started yet are never started
    }
    unsplit_.clear();
    if (!requests_.empty()) {
      ZS_LOG(kWarn) << "IoEngine (" << to_string(kind_) << ") destroyed with " << requests_.size()
                    << " request(s) not waited for; waiting for the " << in_flight_
                    << " piece(s) in flight, " << dropped << " request(s) left incomplete";
    }
    stop_ = true;
  }
  work_cv_.notify_all();
  completer_.join();
}

IoEngine::Handle PieceEngine::submit_read(AioFile& file, void* buf, int64_t bytes, int64_t offset) {
  return submit(file, false, static_cast<char*>(buf), bytes, offset);
}

IoEngine::Handle PieceEngine::submit_write(AioFile& file, const void* buf, int64_t bytes,
                                           int64_t offset) {
  // The kernel only reads from a write's buffer; Piece keeps one pointer type for both directions.
  return submit(file, true, static_cast<char*>(const_cast<void*>(buf)), bytes, offset);
}

IoEngine::Handle PieceEngine::submit(AioFile& file, bool write, char* buf, int64_t bytes,
                                     int64_t offset) {
  const char* op = write ? "submit_write" : "submit_read";
  ZS_REQUIRE(bytes >= 0 && offset >= 0 && bytes <= INT64_MAX - offset, UsageError, op, " on ",
             file.path(), ": bytes (", bytes, ") and offset (", offset,
             ") must be >= 0 and their sum representable");
  ZS_REQUIRE(buf != nullptr || bytes == 0, UsageError, op, " on ", file.path(), ": null buffer for ",
             bytes, " bytes at offset ", offset);
  ZS_REQUIRE(!write || (file.flags() & AioFile::kReadWrite), UsageError, "submit_write on ",
             file.path(), ": the file was opened read-only (AioFile::kRead); open it with "
             "AioFile::kReadWrite to write");
  if (file.direct()) check_direct_alignment(file, op, buf, bytes, offset);

  std::lock_guard<std::mutex> lock(mu_);
  ZS_REQUIRE(broken_.empty(), IoError, "IoEngine (", to_string(kind_), ") is unusable: ", broken_);
  const Handle h = next_handle_++;
  Request& r = requests_[h];
  r.file = &file;
  r.write = write;
  r.buf = buf;
  r.bytes = bytes;
  r.offset = offset;
  if (bytes > 0) {
    unsplit_.push_back(h);
    pump_locked();
  }
  return h;
}

void PieceEngine::pump_locked() {
  std::vector<Piece*> batch;
  while (in_flight_ < options_.queue_depth && !unsplit_.empty()) {
    auto it = requests_.find(unsplit_.front());
    if (it == requests_.end() || it->second.split == it->second.bytes) {  // cancelled by a failure
      unsplit_.pop_front();
      continue;
    }
    Request& r = it->second;
    Piece& p = pieces_[free_slots_.back()];
    free_slots_.pop_back();
    p.request = it->first;
    p.fd = r.file->fd();
    p.write = r.write;
    p.buf = r.buf + r.split;
    p.bytes = std::min(options_.block_size, r.bytes - r.split);
    p.offset = r.offset + r.split;
    p.result = 0;
    p.retries = 0;
    r.split += p.bytes;
    ++r.in_flight;
    ++in_flight_;
    if (r.split == r.bytes) unsplit_.pop_front();
    batch.push_back(&p);
  }
  start_locked(batch);
}

void PieceEngine::start_locked(std::vector<Piece*>& batch) {
  std::vector<Piece*> failed;
  while (!batch.empty()) {
    failed.clear();
    try {
      backend_->start(batch.data(), static_cast<int>(batch.size()), failed);
    } catch (const std::exception& e) {
      broken_ = e.what();
      done_cv_.notify_all();
      throw;
    }
    batch.clear();
    for (Piece* p : failed) {
      if (Piece* again = complete_locked(p)) batch.push_back(again);
    }
  }
  work_cv_.notify_one();
}

Piece* PieceEngine::complete_locked(Piece* p) {
  Request& r = requests_.at(p->request);
  const int64_t res = p->result;
  if ((res == -EINTR || res == -EAGAIN) && ++p->retries <= kMaxRetries) return p;
  if (res < 0) {
    record_failure_locked(r, static_cast<int>(-res), p->offset, p->bytes);
  } else if (res == 0 || res > p->bytes) {
    // Reading 0 bytes is the end of the file; a write that moves nothing (or a count above what
    // was asked) would loop forever, so it is reported as an I/O error.
    record_failure_locked(r, (res == 0 && !p->write) ? 0 : EIO, p->offset, p->bytes);
  } else {
    p->buf += res;
    p->bytes -= res;
    p->offset += res;
    p->retries = 0;
    // Partial transfer: start the rest, even when another piece of the request has failed, so
    // the error names the lowest failing offset (e.g. the true end of a truncated file).
    if (p->bytes > 0) return p;
  }
  finish_piece_locked(p);
  return nullptr;
}

void PieceEngine::finish_piece_locked(Piece* p) {
  Request& r = requests_.at(p->request);
  --r.in_flight;
  --in_flight_;
  free_slots_.push_back(p->slot);
  if (r.done()) done_cv_.notify_all();
}

void PieceEngine::record_failure_locked(Request& r, int err, int64_t offset, int64_t bytes) {
  if (!r.failed || offset < r.fail_offset) {
    r.err = err;
    r.fail_offset = offset;
    r.fail_bytes = bytes;
  }
  r.failed = true;
  r.split = r.bytes;  // the rest of a failed request is not started
}

void PieceEngine::throw_failure(const Request& r) const {
  if (r.err == 0) {
    ZS_THROW(IoError, short_read_message(*r.file, r.fail_offset - r.offset, r.bytes, r.offset));
  }
  ZS_THROW(IoError, io_failure_message(*r.file, r.write, r.fail_bytes, r.fail_offset, r.err));
}

void PieceEngine::wait(Handle h) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = requests_.find(h);
  ZS_REQUIRE(it != requests_.end(), UsageError, "IoEngine::wait(", h,
             "): no such request (not submitted to this engine, or already waited)");
  Request& r = it->second;  // stays valid: only this call erases it
  ZS_REQUIRE(!r.claimed, UsageError, "IoEngine::wait(", h,
             "): another thread is already waiting for this request (wait_all or wait)");
  r.claimed = true;
  done_cv_.wait(lock, [&] { return r.done() || !broken_.empty(); });
  ZS_REQUIRE(r.done(), IoError, "IoEngine (", to_string(kind_), ") is unusable: ", broken_);
  const Request copy = r;
  requests_.erase(h);
  lock.unlock();
  if (copy.failed) throw_failure(copy);
}

void PieceEngine::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<Handle> mine;
  for (auto& [h, r] : requests_) {
    if (r.claimed) continue;
    r.claimed = true;
    mine.push_back(h);
  }
  std::sort(mine.begin(), mine.end());
  auto all_done = [&] {
    return std::all_of(mine.begin(), mine.end(), [&](Handle h) { return requests_.at(h).done(); });
  };
  done_cv_.wait(lock, [&] { return all_done() || !broken_.empty(); });
  ZS_REQUIRE(all_done(), IoError, "IoEngine (", to_string(kind_), ") is unusable: ", broken_);
  bool failed = false;
  Request first;  // the earliest submitted request that failed
  for (Handle h : mine) {
    const Request& r = requests_.at(h);
    if (r.failed && !failed) {
      first = r;
      failed = true;
    }
    requests_.erase(h);
  }
  lock.unlock();
  if (failed) throw_failure(first);
}

void PieceEngine::completion_loop() {
  std::vector<Piece*> done, again;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || in_flight_ > 0 || !broken_.empty(); });
      if (!broken_.empty() || (stop_ && in_flight_ == 0)) return;
    }
    done.clear();
    try {
      backend_->reap(done);  // blocks, without the lock, until a piece finishes
      std::lock_guard<std::mutex> lock(mu_);
      again.clear();
      for (Piece* p : done) {
        if (Piece* q = complete_locked(p)) again.push_back(q);
      }
      start_locked(again);
      if (!stop_) pump_locked();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.empty()) broken_ = e.what();
      ZS_LOG(kError) << "IoEngine (" << to_string(kind_) << ") completion thread failed: " << e.what();
      done_cv_.notify_all();
      return;
    }
  }
}

}  // namespace zeroshard::aio_detail
