#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Puts the licence identifier "SPDX-License-Identifier: Apache-2.0" at the top of every source file
# that lacks it, as a comment in the file's own syntax:
#   C, C++, CUDA, protobuf, JavaScript   // SPDX-License-Identifier: Apache-2.0   (line 1)
#   CMake (CMakeLists.txt, *.cmake[.in]) # SPDX-License-Identifier: Apache-2.0    (line 1)
#   shell, Python, Slurm, other scripts  # SPDX-License-Identifier: Apache-2.0    (after the #! line
#                                        and a Python coding line, if any)
# A file already holding the identifier in its first 5 lines is left alone, so running it twice
# changes nothing. Other files (Markdown, JSON, configs, test data formats) are not touched.
#
# Usage: scripts/add-spdx.sh           add the line where it is missing, list the files changed
#        scripts/add-spdx.sh --check   change nothing; list the files lacking it, exit 1 if any
# Files: those git tracks in this checkout; outside a git checkout (an unpacked archive), every
# file under the tree except build*/ folders.
set -euo pipefail

readonly kId="SPDX-License-Identifier: Apache-2.0"
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  -h | --help) sed -n '3,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "add-spdx.sh: unknown argument '$1' (expected --check or nothing)" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."

list_files() {
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files -z
  else
    find . -type f -not -path './.git/*' -not -path './build*' -print0 | sed -z 's|^\./||'
  fi
}

# Prints the comment style of a file: "c" (// on line 1, or after a #! line), "hash1" (# on line 1),
# "hash" (# after a #! line and a coding line), or nothing when the file is not a source file.
style_of() {
  local f=$1 base
  base=${f##*/}
  case "$base" in
    *.c | *.cc | *.cpp | *.cxx | *.h | *.hh | *.hpp | *.cu | *.cuh | *.proto | *.mjs | *.js) echo c ;;
    CMakeLists.txt | *.cmake | *.cmake.in) echo hash1 ;;
    *.sh | *.bash | *.py | *.sbatch) echo hash ;;
    *)
      if [[ -s "$f" ]] && head -c 2 -- "$f" | grep -q '^#!'; then echo hash; fi
      ;;
  esac
}

has_id() { head -n 5 -- "$1" | grep -q 'SPDX-License-Identifier:'; }

# Number of leading lines to keep above the identifier: a #! line, then a Python coding line.
keep_lines() {
  local f=$1 n=0 first second
  first=$(sed -n 1p -- "$f")
  second=$(sed -n 2p -- "$f")
  if [[ $first == '#!'* ]]; then
    n=1
    [[ $second =~ ^#.*coding[:=] ]] && n=2
  elif [[ $first =~ ^#.*coding[:=] ]]; then
    n=1
  fi
  echo "$n"
}

add_id() {
  local f=$1 style=$2 n tmp
  n=0
  [[ $style == hash1 ]] || n=$(keep_lines "$f")
  tmp=$(mktemp)
  {
    if ((n > 0)); then head -n "$n" -- "$f"; fi
    if [[ $style == c ]]; then printf '// %s\n' "$kId"; else printf '# %s\n' "$kId"; fi
    tail -n "+$((n + 1))" -- "$f"
  } > "$tmp"
  cat "$tmp" > "$f" # keeps the file's mode (executable scripts stay executable)
  rm -f "$tmp"
}

missing=0
while IFS= read -r -d '' f; do
  [[ -f "$f" && ! -L "$f" ]] || continue
  style=$(style_of "$f")
  [[ -n $style ]] || continue
  has_id "$f" && continue
  missing=$((missing + 1))
  if ((check_only)); then
    echo "$f"
  else
    add_id "$f" "$style"
    echo "added: $f"
  fi
done < <(list_files)

if ((check_only)); then
  if ((missing)); then
    echo "add-spdx.sh: $missing file(s) lack '$kId'; run scripts/add-spdx.sh to add it" >&2
    exit 1
  fi
  echo "add-spdx.sh: every source file carries '$kId'"
fi
