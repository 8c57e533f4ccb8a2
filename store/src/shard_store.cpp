// SPDX-License-Identifier: Apache-2.0
// ShardStore: host tensors (CPU) or one checksummed file per shard (NVME). See shard_store.h.

#include "zeroshard/store/shard_store.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>


#include <chrono>
#include <cstring>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/io/offload_dir.h"
#include "zeroshard/io/pinned_pool.h"
#include "zeroshard/store/record_file.h"

namespace zeroshard {

const char* to_string(OffloadTarget t) {
  switch (t) {
    case OffloadTarget::kDevice: return "DEVICE";
    case OffloadTarget::kCpu: return "CPU";
    case OffloadTarget::kNvme: return "NVME";
  }
  return "unknown offload target";
}


namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// `elems` fp32 elements whose data is kDirectAlignment-aligned (a narrow of a slightly larger
// tensor from the default allocator), for O_DIRECT reads and writes.
at::Tensor aligned_empty(int64_t elems) {
  const int64_t slack = kDirectAlignment / static_cast<int64_t>(sizeof(float));
  at::Tensor raw = at::empty({elems + slack}, at::kFloat);
  const auto addr = reinterpret_cast<uintptr_t>(raw.data_ptr<float>());
  const int64_t shift = static_cast<int64_t>((kDirectAlignment - addr % kDirectAlignment) % kDirectAlignment) /
                        static_cast<int64_t>(sizeof(float));
  return raw.narrow(0, shift, elems);
}

bool aligned_for_io(const at::Tensor& t, int64_t bytes) {
  if (!t.device().is_cpu() || !t.is_contiguous()) return false;
  const auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  const auto* base = static_cast<const char*>(t.storage().data());
  const int64_t room = static_cast<int64_t>(t.storage().nbytes()) - (static_cast<const char*>(t.data_ptr()) - base);
  return addr % kDirectAlignment == 0 && room >= bytes;
}

}  // namespace

struct ShardStore::Impl {
  struct Slot {
    std::string unit;
    int64_t numel = 0;
    int64_t file_bytes = 0;  // numel * 4 rounded up to kDirectAlignment
    // CPU
    at::Tensor host;
    // NVME: records of block_size bytes, one file per generation
    std::unique_ptr<RecordFile> files[2];
    int current = 0;             // the generation loads read, unless `staged`
    bool staged = false;         // saved into generation 1 - current since begin_step()
    bool written[2] = {false, false};  // the generation holds the last content saved into it
    int write_gen = 0;           // the generation the write-behind in flight goes to
    bool reading = false;
    // Write-behind (save_async): the bytes in memory until the write completes, or after it failed.
    bool writing = false;
    IoEngine::Handle write = 0;
    at::Tensor held;          // aligned, at least file_bytes
    std::string write_error;  // the failed write's error, until flush() reports it
    IoEngine::Handle read = 0;
    at::Tensor read_buf;  // aligned, file_bytes / 4 elements
  };

  StoreOptions o;
  Kind kind;
  const char* what;     // "parameter" or "gradient", in messages
  MemCategory reading;  // what a read-ahead buffer counts as
  int rank;
  MemoryStats* mem;
  std::shared_ptr<IoEngine> io;
  std::unique_ptr<OffloadDir> dir;
  PinnedPool pool;
  std::vector<Slot> slots;
  IoStats stats;
  int64_t disk_bytes = 0;
  int64_t host_bytes = 0;
  int last_write = -1;  // the slot written behind last: one write-behind in flight at a time
  bool staging = false;  // between begin_step() and commit() / abandon()

  Impl(const StoreOptions& opts, Kind k, int r, MemoryStats* m, std::shared_ptr<IoEngine> engine)
      : o(opts),
        kind(k),
        what(k == Kind::kParams ? "parameter" : "gradient"),
        reading(k == Kind::kParams ? MemCategory::kShardedParams : MemCategory::kGradShards),
        rank(r),
        mem(m),
        io(std::move(engine)),
        pool(opts.pin_memory, nullptr) {
    const char* what = kind == Kind::kParams ? "parameter" : "gradient";
    ZS_REQUIRE(o.target == OffloadTarget::kCpu || o.target == OffloadTarget::kNvme, UsageError,
               "a ", what, " ShardStore needs StoreOptions.target = CPU or NVME, got ", to_string(o.target));
    ZS_REQUIRE(o.block_size >= kDirectAlignment && o.block_size % kDirectAlignment == 0, UsageError,
               "StoreOptions.block_size = ", o.block_size, " must be a positive multiple of ", kDirectAlignment);
    ZS_REQUIRE(o.generations == 1 || o.generations == 2, UsageError, "StoreOptions.generations = ", o.generations,
               " must be 1 or 2");
    if (o.target != OffloadTarget::kNvme) return;
    dir = kind == Kind::kParams
              ? std::make_unique<OffloadDir>(o.nvme_path, "zeroshard-params-rank", rank, ".param", "parameter shards")
              : std::make_unique<OffloadDir>(o.nvme_path, "zeroshard-grads-rank", rank, ".grad", "gradient shards");
    if (!io) {
      io = make_io_engine(IoOptions{o.io_backend, o.queue_depth, o.block_size});
    }
  }

  Slot& at(int slot) {
    ZS_CHECK(slot >= 0 && static_cast<size_t>(slot) < slots.size(), "ShardStore: no slot ", slot);
    return slots[static_cast<size_t>(slot)];
  }
  const Slot& at(int slot) const { return const_cast<Impl*>(this)->at(slot); }

  static int read_gen(const Slot& s) { return s.staged ? 1 - s.current : s.current; }
  // The generation a save goes to (marking the slot staged): the one not read from during a step.
  int next_write_gen(Slot& s) {
    if (!staging || o.generations == 1) return s.current;
    s.staged = true;
    return 1 - s.current;
  }

  void start_read(Slot& s) {
    RecordFile& f = *s.files[read_gen(s)];
    ZS_CHECK(s.written[read_gen(s)], "ShardStore: slot of unit '", s.unit, "' read before it was saved");
    s.read_buf = aligned_empty(s.file_bytes / static_cast<int64_t>(sizeof(float)));
    s.read = f.read(*io, 0, f.records(), s.read_buf.data_ptr());
    s.reading = true;
    // A shard on its way in is memory like a resident one (the FlatParam counts it from load()).
    if (mem != nullptr) mem->add(reading, s.numel * 4);
  }

  // Waits for the slot's write-behind (never throws): on success the file holds the content and
  // the bytes go (unless `keep`: the caller takes them); on failure they stay held and the error
  // waits for flush().
  void complete_write(Slot& s, bool keep = false) {
    if (!s.writing) return;
    s.writing = false;
    try {
      io->wait(s.write);
      stats.bytes_written += s.file_bytes;
      s.written[s.write_gen] = true;
      s.write_error.clear();
      if (!keep) drop_held(s);
    } catch (const Error& e) {
      s.written[s.write_gen] = false;
      s.write_error = e.message();
    }
  }

  void drop_held(Slot& s) {
    if (!s.held.defined()) return;
    s.held = at::Tensor();
    if (mem != nullptr) mem->sub(reading, s.numel * 4);
  }

  at::Tensor finish_read(Slot& s) {
    const auto t0 = std::chrono::steady_clock::now();
    s.reading = false;
    at::Tensor buf = std::move(s.read_buf);
    s.read_buf = at::Tensor();
    if (mem != nullptr) mem->sub(reading, s.numel * 4);
    io->wait(s.read);  // IoError naming the file and offset (short read: truncated)
    stats.read_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats.bytes_read += s.file_bytes;
    RecordFile& f = *s.files[read_gen(s)];
    f.verify(0, f.records(), buf.data_ptr());
    return buf.narrow(0, 0, s.numel);
  }
};

ShardStore::ShardStore(const StoreOptions& options, int rank, MemoryStats* mem, std::shared_ptr<IoEngine> io,
                       Kind kind)
    : impl_(std::make_unique<Impl>(options, kind, rank, mem, std::move(io))) {}

ShardStore::~ShardStore() {
  if (!impl_) return;
  for (auto& s : impl_->slots) discard(static_cast<int>(&s - impl_->slots.data()));
  if (impl_->mem != nullptr) {
    impl_->mem->sub(MemCategory::kNvme, impl_->disk_bytes);
    impl_->mem->sub(MemCategory::kOffloadHost, impl_->host_bytes);
  }
  for (auto& s : impl_->slots) {
    for (auto& f : s.files) f.reset();
  }
}

OffloadTarget ShardStore::target() const { return impl_->o.target; }
ShardStore::Kind ShardStore::kind() const { return impl_->kind; }

int ShardStore::add(const std::string& unit, int64_t numel) {
  ZS_CHECK(numel >= 0, "ShardStore: negative size for unit '", unit, "'");
  Impl::Slot s;
  s.unit = unit;
  s.numel = numel;
  s.file_bytes = std::max<int64_t>(kDirectAlignment, round_up(numel * 4, kDirectAlignment));
  const int index = static_cast<int>(impl_->slots.size());
  if (impl_->o.target == OffloadTarget::kNvme) {
    const bool params = impl_->kind == Kind::kParams;
    const std::string stem =
        impl_->dir->path() + "/" + std::to_string(index) + "-" + offload_file_stem(unit) + (params ? ".param" : ".grad");
    // The space is reserved now: a drive too small for the shards fails here, at wrap time.
    for (int g = 0; g < impl_->o.generations; ++g) {
      s.files[g] = std::make_unique<RecordFile>(
          g == 0 ? stem : stem + "." + std::to_string(g), s.file_bytes, impl_->o.block_size, impl_->o.direct_io,
          RecordFile::Label{std::string(impl_->what) + " shard", std::string(impl_->what) + " shards", unit,
                            impl_->rank});
      impl_->disk_bytes += s.file_bytes;
      if (impl_->mem != nullptr) impl_->mem->add(MemCategory::kNvme, s.file_bytes);
    }
  }
  impl_->slots.push_back(std::move(s));
  return index;
}

void ShardStore::save(int slot, const at::Tensor& values) {
  Impl::Slot& s = impl_->at(slot);
  ZS_CHECK(values.scalar_type() == at::kFloat && values.numel() == s.numel && values.is_contiguous(),
           "ShardStore: saving ", values.numel(), " elements into the slot of unit '", s.unit, "' (", s.numel, ")");
  discard(slot);  // a read ahead of the old content is stale now; an earlier write must land first
  if (impl_->o.target == OffloadTarget::kCpu) {
    if (!s.host.defined()) {  // the slot's bytes live in host memory from now on
      impl_->host_bytes += s.numel * 4;
      if (impl_->mem != nullptr) impl_->mem->add(MemCategory::kOffloadHost, s.numel * 4);
    }
    if (values.device().is_cpu() && !at::globalContext().hasCUDA()) {
      s.host = values;  // the working shard is the host tensor: nothing to copy
      return;
    }
    if (!s.host.defined()) s.host = impl_->pool.empty(s.numel, at::kFloat);
    if (!s.host.is_same(values)) s.host.copy_(values);
    return;
  }
  // NVME: write from the tensor itself when it is an aligned host buffer with room for the padded
  // size (what load() hands out), else from an aligned copy.
  at::Tensor src = values;
  if (!aligned_for_io(values, s.file_bytes)) {
    src = aligned_empty(s.file_bytes / 4);
    src.narrow(0, 0, s.numel).copy_(values);
    src = src.narrow(0, 0, s.numel);
  }
  auto* data = static_cast<char*>(src.data_ptr());
  // The padding is part of the file: zero it, so the checksums never depend on stale bytes.
  std::memset(data + s.numel * 4, 0, static_cast<size_t>(s.file_bytes - s.numel * 4));
  const int gen = impl_->next_write_gen(s);
  RecordFile& f = *s.files[gen];
  s.written[gen] = false;  // until the write completes, the file holds neither old nor new content
  impl_->io->wait(f.write(*impl_->io, 0, f.records(), data));
  impl_->stats.bytes_written += s.file_bytes;
  s.written[gen] = true;
}

void ShardStore::save_async(int slot, const at::Tensor& values) {
  Impl::Slot& s = impl_->at(slot);
  if (impl_->o.target != OffloadTarget::kNvme) {
    save(slot, values);
    return;
  }
  ZS_CHECK(values.scalar_type() == at::kFloat && values.numel() == s.numel && values.is_contiguous(),
           "ShardStore: saving ", values.numel(), " elements into the slot of unit '", s.unit, "' (", s.numel, ")");
  discard(slot);
  // One write in flight: it overlaps whatever the caller does until its next save (the next
  // unit's backward), and the bytes held stay one shard (a failed write's stay until flush()).
  if (impl_->last_write >= 0) impl_->complete_write(impl_->at(impl_->last_write));
  impl_->last_write = slot;
  // The store keeps the bytes until the write lands: `values` itself when it is an aligned host
  // buffer with room for the padded size (what load() hands out), else an aligned copy.
  at::Tensor src = values;
  if (!aligned_for_io(values, s.file_bytes)) {
    src = aligned_empty(s.file_bytes / 4);
    src.narrow(0, 0, s.numel).copy_(values);
  }
  auto* data = static_cast<char*>(src.data_ptr());
  std::memset(data + s.numel * 4, 0, static_cast<size_t>(s.file_bytes - s.numel * 4));
  s.write_gen = impl_->next_write_gen(s);
  RecordFile& f = *s.files[s.write_gen];
  s.written[s.write_gen] = false;
  s.held = src;
  if (impl_->mem != nullptr) impl_->mem->add(impl_->reading, s.numel * 4);
  s.write = f.write(*impl_->io, 0, f.records(), data);
  s.writing = true;
}

void ShardStore::flush() {
  std::string first;
  int failed = 0;
  for (auto& s : impl_->slots) {
    impl_->complete_write(s);
    if (s.write_error.empty()) continue;
    if (failed++ == 0) first = s.write_error;
    s.write_error.clear();  // reported once; the values stay held and the next save retries
  }
  ZS_REQUIRE(failed == 0, IoError, "writing ", impl_->what, " shards under '", impl_->dir->path(), "' failed (rank ",
             impl_->rank, ", ", failed, " shard(s)): ", first, "; their values stay in memory until a write succeeds");
}

void ShardStore::discard(int slot) noexcept {
  Impl::Slot& s = impl_->slots[static_cast<size_t>(slot)];
  cancel(slot);
  impl_->complete_write(s);
  impl_->drop_held(s);
  s.write_error.clear();
}

void ShardStore::prefetch(int slot, c10::Device device) {
  (void)device;
  Impl::Slot& s = impl_->at(slot);
  if (impl_->o.target != OffloadTarget::kNvme || s.reading || !s.written[Impl::read_gen(s)] || s.held.defined()) {
    return;
  }
  impl_->start_read(s);
}

at::Tensor ShardStore::load(int slot, c10::Device device) {
  Impl::Slot& s = impl_->at(slot);
  at::Tensor values;
  if (impl_->o.target == OffloadTarget::kCpu) {
    ZS_CHECK(s.host.defined(), "ShardStore: slot of unit '", s.unit, "' loaded before it was saved");
    if (s.host.device() == device) return s.host;
    return s.host.to(device, /*non_blocking=*/false, /*copy=*/true);
  }
  if (s.held.defined()) {
    // Written behind: the values are in memory. Taken over once the write landed; copied while
    // they are the only copy (the write failed: the slot keeps them and the next save retries).
    impl_->complete_write(s, /*keep=*/true);
    values = s.held.narrow(0, 0, s.numel);
    if (s.written[s.write_gen]) {
      impl_->drop_held(s);
    } else {
      values = values.clone();
    }
    return device.is_cpu() ? values : values.to(device);
  }
  // After a failed write the FlatParam keeps the shard resident and modified: it never loads it.
  ZS_CHECK(s.written[Impl::read_gen(s)], "ShardStore: load of the shard of unit '", s.unit, "' whose last write to '",
           s.files[Impl::read_gen(s)]->path(), "' failed");
  if (!s.reading) impl_->start_read(s);
  values = impl_->finish_read(s);
  return device.is_cpu() ? values : values.to(device);
}

at::Tensor ShardStore::allocate(int slot, c10::Device device) {
  Impl::Slot& s = impl_->at(slot);
  discard(slot);
  if (!device.is_cpu()) return at::empty({s.numel}, at::TensorOptions().dtype(at::kFloat).device(device));
  if (impl_->o.target == OffloadTarget::kNvme) return aligned_empty(s.file_bytes / 4).narrow(0, 0, s.numel);
  return at::empty({s.numel}, at::kFloat);
}

void ShardStore::cancel(int slot) noexcept {
  Impl::Slot& s = impl_->slots[static_cast<size_t>(slot)];
  if (!s.reading) return;
  s.reading = false;
  try {
    impl_->io->wait(s.read);
  } catch (...) {  // the read is dropped; a later load reads again and reports
  }
  s.read_buf = at::Tensor();
  if (impl_->mem != nullptr) impl_->mem->sub(impl_->reading, s.numel * 4);
}

const std::string& ShardStore::unit(int slot) const { return impl_->at(slot).unit; }
void ShardStore::rename(int slot, const std::string& unit) {
  Impl::Slot& s = impl_->at(slot);
  s.unit = unit;
  for (auto& f : s.files) {
    if (f) f->rename(unit);
  }
}
std::string ShardStore::file(int slot) const {
  const Impl::Slot& s = impl_->at(slot);
  const auto& f = s.files[Impl::read_gen(s)];
  return f ? f->path() : std::string();
}

int ShardStore::generations() const { return impl_->o.target == OffloadTarget::kNvme ? impl_->o.generations : 1; }

void ShardStore::begin_step() { impl_->staging = true; }

void ShardStore::commit() {
  if (impl_->o.target == OffloadTarget::kNvme) flush();  // throws with the step still open
  for (auto& s : impl_->slots) {
    if (!s.staged) continue;
    s.current = 1 - s.current;
    s.staged = false;
  }
  impl_->staging = false;
}

void ShardStore::abandon() noexcept {
  for (auto& s : impl_->slots) {
    discard(static_cast<int>(&s - impl_->slots.data()));
    s.staged = false;
  }
  impl_->staging = false;
}
int64_t ShardStore::bytes_on_disk() const { return impl_->disk_bytes; }
int64_t ShardStore::bytes_in_host() const { return impl_->host_bytes; }
ShardStore::IoStats ShardStore::io_stats() const { return impl_->stats; }

}  // namespace zeroshard
