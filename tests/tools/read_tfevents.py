#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads a TensorBoard event file with nothing but the standard library, to check what
zeroshard's TensorBoardWriter writes independently of its own schema and code: the TFRecord
framing (little-endian uint64 length, masked CRC-32C of the length, data, masked CRC-32C of the
data) with a CRC-32C written here, and the protobuf wire format of TensorBoard's Event and
Summary messages parsed by hand (field numbers from TensorBoard's event.proto and summary.proto:
Event.wall_time 1, step 2, file_version 3, summary 5; Summary.value 1; Value.tag 1,
simple_value 2).

usage: read_tfevents.py FILE|DIR [--json] [--expect-tag TAG]... [--expect-steps N]
  DIR: its newest events.out.tfevents.* file. Prints one line per event (or, with --json, one JSON document: non-finite values as null);
  exits 1 naming the offset and what is wrong for a bad CRC, a truncated record or a malformed
  message, and when an --expect-tag is never written or the last step is not --expect-steps.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class BadFile(Exception):
    pass


def records(data):
    """Yields (offset, payload) of every record, checking both CRCs."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise BadFile(f"offset {pos}: truncated record header ({len(data) - pos} bytes)")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(crc32c(header)) != length_crc:
            raise BadFile(f"offset {pos}: the length's CRC does not match")
        end = pos + 12 + length
        if end + 4 > len(data):
            raise BadFile(f"offset {pos}: truncated record of {length} bytes")
        payload = data[pos + 12:end]
        (data_crc,) = struct.unpack("<I", data[end:end + 4])
        if masked(crc32c(payload)) != data_crc:
            raise BadFile(f"offset {pos}: the data's CRC does not match")
        yield pos, payload
        pos = end + 4


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise BadFile("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos
        if shift > 63:
            raise BadFile("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value): an int for varints, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise BadFile(f"field {number}: unsupported wire type {wire}")
        if pos > len(buf):
            raise BadFile(f"field {number}: runs past the message")
        yield number, wire, value


def summary_values(buf):
    out = []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 2:
            tag, simple = None, None
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    tag = v.decode("utf-8")
                elif n == 2 and w == 5:
                    (simple,) = struct.unpack("<f", v)
            if tag is None:
                raise BadFile("a summary value without a tag")
            out.append((tag, simple))
    return out


def event(buf):
    e = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for number, wire, value in fields(buf):
        if number == 1 and wire == 1:
            (e["wall_time"],) = struct.unpack("<d", value)
        elif number == 2 and wire == 0:
            e["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            e["file_version"] = value.decode("utf-8")
        elif number == 5 and wire == 2:
            e["values"] = summary_values(value)
    return e


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    events = []
    for offset, payload in records(data):
        try:
            events.append(event(payload))
        except BadFile as err:
            raise BadFile(f"offset {offset}: {err}") from None
    return events


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--expect-tag", action="append", default=[])
    ap.add_argument("--expect-steps", type=int)
    args = ap.parse_args()
    if os.path.isdir(args.file):
        found = glob.glob(os.path.join(args.file, "events.out.tfevents.*"))
        if not found:
            print(f"read_tfevents: no events.out.tfevents.* file in {args.file}", file=sys.stderr)
            return 1
        args.file = max(found, key=os.path.getmtime)
    try:
        events = read(args.file)
    except (BadFile, OSError) as err:
        print(f"read_tfevents: {args.file}: {err}", file=sys.stderr)
        return 1
    if not events or events[0]["file_version"] != "brain.Event:2":
        print(f"read_tfevents: {args.file}: the first event is not file_version brain.Event:2", file=sys.stderr)
        return 1
    if args.json:
        for e in events:
            e["values"] = [[t, v if v is not None and math.isfinite(v) else None] for t, v in e["values"]]
        print(json.dumps({"events": events}))
    else:
        for e in events:
            values = ", ".join(f"{t}={v:.6g}" for t, v in e["values"])
            print(f"step {e['step']}: {values or e['file_version']}")
    tags = {t for e in events for t, _ in e["values"]}
    missing = [t for t in args.expect_tag if t not in tags]
    if missing:
        print(f"read_tfevents: {args.file}: no {', '.join(missing)} (tags: {', '.join(sorted(tags))})", file=sys.stderr)
        return 1
    last = max(e["step"] for e in events)
    if args.expect_steps is not None and last != args.expect_steps:
        print(f"read_tfevents: {args.file}: last step {last}, expected {args.expect_steps}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
