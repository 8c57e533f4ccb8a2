// SPDX-License-Identifier: Apache-2.0
#pragma once
// CRC-32C (Castagnoli), the checksum of offloaded state chunks and checkpoint files: the SSE4.2
// crc32 instruction when the CPU has it (chosen at run time), a table otherwise. Thread-safe.

#include <cstddef>
#include <cstdint>

namespace zeroshard {

// Extends `crc` (0 to start) over `bytes` bytes at `data`.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// The two implementations crc32c() chooses between, callable one by one so that tests can check
// each against known answers ("123456789" -> 0xE3069283). Same contract as crc32c().
uint32_t crc32c_table(const void* data, size_t bytes, uint32_t crc = 0);
// Whether this build and CPU have the SSE4.2 crc32 instruction (x86-64 only).
bool crc32c_sse42_available();
// The SSE4.2 path; where the instruction is missing it returns the table's result
// (crc32c_sse42_available() says which one ran).
uint32_t crc32c_sse42(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace zeroshard
