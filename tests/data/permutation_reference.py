#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The shuffle order of zeroshard's samplers, from its description in docs/data.md (a second
implementation to compare with). Prints p(0) .. p(n-1) of the permutation of [0, n) for a seed.

  permutation_reference.py N SEED
"""
import sys

M = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(x):
    x = (x + GOLDEN) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def permutation(n, seed):
    bits = 2
    while bits < 63 and (1 << bits) < n:
        bits += 2
    half = bits // 2
    mask = (1 << half) - 1
    keys, state = [], seed
    for _ in range(6):
        state = (state + GOLDEN) & M
        keys.append(splitmix64(state))

    def encrypt(x):
        left, right = x >> half, x & mask
        for k in keys:
            left, right = right, left ^ (splitmix64(right ^ k) & mask)
        return (left << half) | right

    def at(i):
        x = encrypt(i)
        while x >= n:
            x = encrypt(x)
        return x

    return [at(i) for i in range(n)]


if __name__ == "__main__":
    print(" ".join(str(v) for v in permutation(int(sys.argv[1]), int(sys.argv[2]))))
