#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Checks the user documentation (README.md and docs/*.md) for two things and fails naming
# FILE:LINE for each problem:
#   1. words about how the project is developed rather than how zeroshard is used: issue numbers
#      ("issue 4", "(#15)"), work sessions, helpers and leads, the workplace and its tools, branch
#      names, commit ids, planning files that are not in the repository (the PATTERNS list below);
#   2. relative links ([text](path), [ref]: path) that point to a file or folder that does not exist.
# Fenced code blocks are checked for process words too, where identifiers such as `session.device()`
# and the C++ class `Session` are allowed; links are checked outside code only.
#
# Usage: scripts/check-docs.sh [FILE.md...]   (default: README.md docs/*.md)
#        scripts/check-docs.sh --self-test    (shows that each pattern catches what it is for)
# Exit status: 0 clean, 1 problems found, 2 bad usage. Needs bash and python3 (standard library).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" << 'PYTHON'
import os
import re
import sys
import tempfile

# (what it is, regex). Case-insensitive unless the regex says otherwise with (?-i:...).
PATTERNS = [
    ("issue number", r"\bissues?\s*#?\d+"),
    ("issue number", r"\(#\d+\)"),
    ("issue number", r"\b(?:PR|pull request|fix(?:es|ed)?|close[sd]?|see)\s+#\d+"),
    ("issue reference", r"\b(?:the|this|that|next|previous|offload|models?|architecture|config)\s+issues?\b"),
    ("work session", r"\bsessions?\b"),
    ("helper", r"\bhelpers?\b"),
    ("lead", r"\blead\s+engineers?\b|\bthe\s+lead\b"),
    ("workplace", r"\bworkplace\b"),
    ("lab", r"\blab\b"),
    ("device tool", r"\bdevice\s+(?:tool|time|calls?)\b"),
    ("tool argument", r"\bcarry(?::|\s+argument)"),
    ("branch", r"\bh-peer\b|\bbranch\s+`[^`]+`|\bworktrees?\b"),
    ("planning file", r"(?-i:\b(?:shared/)?(?:DESIGN|STYLE|RULES)\.md\b)"),
    ("commit id", r"\b(?:tree|commit)\s+[0-9a-f]{7,40}\b"),
    ("the project's own machines", r"\b(?:this|the)\s+project's\b"),
]

# Exact phrases in which a match is a legitimate use (the match must lie inside the phrase).
ALLOWED = [
    "ssh session",
    "text helpers",
    "command-line helper",
    "one helper, `zeroshard/base/cli.h`",
    "CUDA stream helpers",
]

COMPILED = [(what, re.compile(rx, re.IGNORECASE)) for what, rx in PATTERNS]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def is_identifier(line, start, end):
    """`Session` (the C++ class) or `session` used as code: session.x, (session, core/session.h, `session`."""
    word = line[start:end]
    if word in ("Session", "Sessions"):
        return True
    before = line[start - 1] if start > 0 else " "
    after = line[end] if end < len(line) else " "
    return before in "/:&(_.<`" or after in ".(),&_>`"


def allowed(line, start, end):
    for phrase in ALLOWED:
        pos = line.find(phrase)
        while pos >= 0:
            if pos <= start and end <= pos + len(phrase):
                return True
            pos = line.find(phrase, pos + 1)
    return False


def process_words(path, lineno, line):
    found = []
    for what, rx in COMPILED:
        for m in rx.finditer(line):
            if allowed(line, m.start(), m.end()):
                continue
            if what == "work session" and is_identifier(line, m.start(), m.end()):
                continue
            found.append(f"{path}:{lineno}: process word '{m.group(0)}' ({what})")
    return found


def links(path, lineno, line):
    found = []
    text = INLINE_CODE.sub("", line)
    targets = [m.group(1) for m in LINK.finditer(text)]
    ref = REF_LINK.match(text)
    if ref:
        targets.append(ref.group(1))
    for target in targets:
        if SCHEME.match(target) or target.startswith("#"):
            continue
        file_part = target.split("#", 1)[0].split("?", 1)[0]
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        if not os.path.exists(resolved):
            found.append(f"{path}:{lineno}: broken link '{target}' ({resolved} does not exist)")
    return found


def check_file(path):
    problems = []
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            problems += process_words(path, lineno, line)
            if not in_fence:
                problems += links(path, lineno, line)
    return problems


def self_test():
    bad = [
        "Fixed in issue 4.", "as issue 15's goal says", "see #12", "a fix (#15)", "the offload issue",
        "the eighth session", "this session's machine", "Seventh session (2026-11-26)",
        "a helper wrote it", "the lead engineer", "this workplace's device tool", "device time",
        "`carry: [\".gpu-debs\"]`", "the carry argument", "branch `h-peer` off `arch`",
        "the map in `shared/DESIGN.md`", "on tree 876cd86", "this project's VM", "a lab notebook",
        "```", "mpirun ...   # the second session", "```",
        "[gone](no/such/file.md)", "[ref]: missing.md",
    ]
    good = [
        "The `Session` reads the environment.", "the Session picks the device",
        "ssh session", "text helpers (`format_double`)", "the command-line helper `cli.h`",
        "every rank issues the gathers", "issued in the same order", "it may carry an adapter",
        "a label", "the leading dimension", "[docs](../README.md)", "[web](https://example.com)",
        "[anchor](#top)", "`[not a link](nowhere.md)`",
        "```", "engine(session, model.ptr());", "zeroshard::Session& s", "#include \"zeroshard/core/session.h\"",
        "rank 1 called #1 all_gather", "[in code](nowhere.md)", "```",
    ]
    with tempfile.TemporaryDirectory() as d:
        bad_path = os.path.join(d, "docs", "bad.md")
        good_path = os.path.join(d, "docs", "good.md")
        os.makedirs(os.path.dirname(bad_path))
        with open(os.path.join(d, "README.md"), "w", encoding="utf-8") as f:
            f.write("# a link target\n")
        with open(bad_path, "w", encoding="utf-8") as f:
            f.write("\n".join(bad) + "\n")
        with open(good_path, "w", encoding="utf-8") as f:
            f.write("\n".join(good) + "\n")
        flagged = {int(p[len(bad_path) + 1:].split(":", 1)[0]) for p in check_file(bad_path)}
        expected = {i for i, text in enumerate(bad, 1) if text != "```"}
        missed = sorted(expected - flagged)
        false_hits = check_file(good_path)
    ok = True
    for i in missed:
        print(f"self-test: not caught: {bad[i - 1]!r}")
        ok = False
    for p in false_hits:
        print(f"self-test: wrongly flagged: {p}")
        ok = False
    if not ok:
        print("check-docs self-test: FAILED")
        return 1
    print(f"check-docs self-test: passed ({len(expected)} bad lines caught, "
          f"{len(good) - 4} good lines left alone)")
    return 0


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print("usage: scripts/check-docs.sh [FILE.md...] | --self-test")
        return 0
    if argv and argv[0] == "--self-test":
        return self_test()
    bad_args = [a for a in argv if a.startswith("-")]
    if bad_args:
        print(f"check-docs: unknown option '{bad_args[0]}' (expected FILE.md..., --self-test or --help)",
              file=sys.stderr)
        return 2
    files = argv or ["README.md"] + sorted(
        os.path.join("docs", n) for n in os.listdir("docs") if n.endswith(".md"))
    problems = []
    for path in files:
        if not os.path.isfile(path):
            print(f"check-docs: no such file '{path}'", file=sys.stderr)
            return 2
        problems += check_file(path)
    for p in problems:
        print(p)
    if problems:
        print(f"check-docs: {len(problems)} problem(s) in {len(files)} file(s): user documentation "
              "speaks about zeroshard, not about how it was made, and links to files that exist",
              file=sys.stderr)
        return 1
    print(f"check-docs: {len(files)} file(s) clean (process words, relative links)")
    return 0


sys.exit(main(sys.argv[1:]))
PYTHON
