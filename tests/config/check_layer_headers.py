#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that no public header of a layer below the config edge knows the config.

The layers below zs_config take plain option structs; zs_config (config/) alone turns the protobuf
schema into them (config/src/resolve.cpp). For every ROOT/<layer>/include/zeroshard/<layer>/*.h,
outside comments and string literals, a header fails when it
  - names the config namespace (`config::`),
  - includes a header generated from the config schema (zeroshard.pb.h), or
  - declares or defines a `from_config`.
checkpoint/checkpoint_manifest.h includes checkpoint.pb.h: the schema of the on-disk checkpoint
manifest (checkpoint/proto/checkpoint.proto), not of the config, and allowed like any other
generated header but zeroshard.pb.h.

  check_layer_headers.py ROOT LAYER...

Prints every violation as FILE:LINE: what; exit status 1 when there is one (or no header at all).
"""

import glob
import os
import re
import sys

RULES = [
    (re.compile(r"\bconfig::"), "names config:: (the layers below zs_config take plain option structs)"),
    (re.compile(r'#\s*include\s*[<"]([^>"]*/)?zeroshard\.pb\.h[>"]'),
     "includes zeroshard.pb.h, the generated config schema"),
    (re.compile(r"\bfrom_config\s*\("),
     "declares from_config (conversions from the config belong in config/src/resolve.cpp)"),
]


def code_lines(text):
    """The text's lines without comments, and without string literals outside #include lines (line
    numbers kept)."""
    # Block comments first, keeping their newlines.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    lines = []
    for line in text.split("\n"):
        if re.match(r"\s*#\s*include\b", line):
            lines.append(line.split("//", 1)[0])
            continue
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)  # string literals (a "//" inside is no comment)
        lines.append(line.split("//", 1)[0])
    return lines


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().split("\n\n")[-2], file=sys.stderr)
        return 2
    root, layers = argv[1], argv[2:]
    headers = violations = 0
    for layer in layers:
        for path in sorted(glob.glob(os.path.join(root, layer, "include", "zeroshard", layer, "*.h"))):
            headers += 1
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                lines = code_lines(f.read())
            for number, line in enumerate(lines, 1):
                for pattern, what in RULES:
                    if pattern.search(line):
                        print(f"{rel}:{number}: {what}")
                        violations += 1
    if headers == 0:
        print(f"check_layer_headers: no public headers under {root} for layers {' '.join(layers)}", file=sys.stderr)
        return 1
    if violations:
        print(f"check_layer_headers: {violations} violation(s) in the public headers of the layers below zs_config")
        return 1
    print(f"check_layer_headers: {headers} public headers of {' '.join(layers)} name no config type, include no "
          f"zeroshard.pb.h and declare no from_config")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
