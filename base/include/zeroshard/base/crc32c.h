#pragma once
// CRC-32C (Castagnoli), the checksum of offloaded state chunks and checkpoint files: the SSE4.2
// crc32 instruction when the CPU has it (chosen at run time), a table otherwise. Thread-safe.

#include <cstddef>
#include <cstdint>

namespace zeroshard {

// Extends `crc` (0 to start) over `bytes` bytes at `data`.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace zeroshard
