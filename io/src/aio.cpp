// SPDX-License-Identifier: Apache-2.0
// make_io_engine: option checks and the backend choice (kAuto: io_uring, then libaio, then the
// thread pool). Backends whose library was not found at configure time are compiled out
// (ZS_HAVE_LIBURING / ZS_HAVE_LIBAIO, set in offload/CMakeLists.txt); asking for one is an IoError.

#include <memory>
#include <string>

#include "aio_engine.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/aio.h"

namespace zeroshard {

namespace aio_detail {

#if !ZS_HAVE_LIBURING
std::unique_ptr<Backend> make_uring_backend(const IoOptions&) {
  ZS_THROW(IoError, "io_uring backend: built without liburing: install liburing-dev and reconfigure");
}
#endif

#if !ZS_HAVE_LIBAIO
std::unique_ptr<Backend> make_libaio_backend(const IoOptions&) {
  ZS_THROW(IoError, "libaio backend: built without libaio: install libaio-dev and reconfigure");
}
#endif

}  // namespace aio_detail

namespace {

constexpr int kMaxQueueDepth = 1024;
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;
constexpr int kMaxThreads = 256;

void check_options(const IoOptions& o) {
  ZS_REQUIRE(o.queue_depth >= 1 && o.queue_depth <= kMaxQueueDepth, UsageError,
             "IoOptions.queue_depth = ", o.queue_depth, ": allowed [1, ", kMaxQueueDepth, "]");
  ZS_REQUIRE(o.block_size >= kDirectAlignment && o.block_size <= kMaxBlockSize &&
                 o.block_size % kDirectAlignment == 0,
             UsageError, "IoOptions.block_size = ", o.block_size, ": allowed [", kDirectAlignment,
             ", ", kMaxBlockSize, "], a multiple of ", kDirectAlignment);
  ZS_REQUIRE(o.threads >= 1 && o.threads <= kMaxThreads, UsageError, "IoOptions.threads = ",
             o.threads, ": allowed [1, ", kMaxThreads, "]");
}

std::unique_ptr<aio_detail::Backend> make_backend(IoBackend kind, const IoOptions& o) {
  switch (kind) {
    case IoBackend::kIoUring: return aio_detail::make_uring_backend(o);
    case IoBackend::kLibaio: return aio_detail::make_libaio_backend(o);
    case IoBackend::kThreads: return aio_detail::make_thread_backend(o);
    case IoBackend::kAuto: break;
  }
  ZS_THROW(UsageError, "IoOptions.backend = ", static_cast<int>(kind), ": not a backend");
}

}  // namespace

const char* to_string(IoBackend b) {
  switch (b) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kIoUring: return "io_uring";
    case IoBackend::kLibaio: return "libaio";
    case IoBackend::kThreads: return "threads";
  }
  return "unknown";
}

std::unique_ptr<IoEngine> make_io_engine(const IoOptions& options) {
  check_options(options);
  if (options.backend != IoBackend::kAuto) {
    return std::make_unique<aio_detail::PieceEngine>(options, options.backend,
                                                     make_backend(options.backend, options));
  }
  std::string why_not;
  for (IoBackend kind : {IoBackend::kIoUring, IoBackend::kLibaio, IoBackend::kThreads}) {
    std::unique_ptr<aio_detail::Backend> backend;
    try {
      backend = make_backend(kind, options);
    } catch (const IoError& e) {
      why_not += detail::concat(why_not.empty() ? "" : "; ", to_string(kind), ": ", e.message());
      continue;
    }
    ZS_LOG(kInfo) << "async I/O: " << to_string(kind) << " (queue depth " << options.queue_depth
                  << ", block " << options.block_size << " bytes"
                  << (kind == IoBackend::kThreads ? detail::concat(", ", options.threads, " threads")
                                                  : std::string())
                  << ")" << (why_not.empty() ? "" : "; not used: ") << why_not;
    IoOptions chosen = options;
    chosen.backend = kind;
    return std::make_unique<aio_detail::PieceEngine>(chosen, kind, std::move(backend));
  }
  ZS_THROW(IoError, "no async I/O backend can start here: ", why_not);
}

}  // namespace zeroshard
