#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""llm.c's token shard format, written and read the way llm.c does (dev/data/data_common.py writes
a 256 x int32 header [magic, version, token count] then the tokens; llmc/dataloader.h checks the
magic, the version and that the file size is exactly header + count x token size). Standard
library only.

  llmc_reference.py write FILE uint16|uint32 COUNT SEED   tokens t[i] = (i * 7919 + SEED) % 60000
                                                           (uint16), % 100000 + 70000 (uint32)
  llmc_reference.py read FILE                              prints 'magic version count' then the
                                                           tokens, space-separated
"""
import array
import os
import sys

HEADERS = {"uint16": (20240520, 1, "H", 2), "uint32": (20240801, 7, "I", 4)}


def tokens_for(dtype, count, seed):
    if dtype == "uint16":
        return [(i * 7919 + seed) % 60000 for i in range(count)]
    return [(i * 7919 + seed) % 100000 + 70000 for i in range(count)]


def write(path, dtype, count, seed):
    magic, version, code, _ = HEADERS[dtype]
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = magic, version, count
    toks = array.array(code, tokens_for(dtype, count, seed))
    assert sys.byteorder == "little"
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())


def read(path):
    with open(path, "rb") as f:
        header = array.array("i")
        header.frombytes(f.read(256 * 4))
        magic, version, count = header[0], header[1], header[2]
        match = [h for h in HEADERS.values() if h[0] == magic]
        if not match:
            sys.exit(f"{path}: bad magic {magic}")
        _, want_version, code, size = match[0]
        if version != want_version:
            sys.exit(f"{path}: bad version {version}")
        if os.path.getsize(path) != 256 * 4 + count * size:
            sys.exit(f"{path}: file size is not as expected")
        toks = array.array(code)
        toks.frombytes(f.read(count * size))
    print(magic, version, count)
    print(" ".join(str(t) for t in toks))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        read(sys.argv[2])
