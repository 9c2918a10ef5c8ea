#!/usr/bin/env bash
# Memory per input of a long input list through crop-resize: peak RSS of a run over N inputs
# minus a run over 1,000, divided by the difference. Two lists: N names of files that do not
# exist (each one an error record), and N symbolic links to one small PNG (each one claims its
# output, resized to 8x8 as .npy). The budget is 100 bytes per input.
#   scripts/bench/input_memory.sh [N]        (default 200000; SHARDKIT_BIN=DIR for other binaries)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
n=${1:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/in"
cp "$root/tests/fixtures/pillow/inputs/rgb.png" "$work/in/0.png"
python3 -c 'import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(1, n + 1): os.symlink("0.png", f"{d}/img{i}.png")' "$work/in" "$n"
peak_kib() { # LIST: crop-resize's peak RSS over that list, in KiB
  # (exit 3 for the missing files is expected)
  { /usr/bin/time -f %M "$bin/crop-resize" -q -r 8 --format npy -o "$work/out.$RANDOM" -j 1 - <"$1" || true; } 2>&1 >/dev/null | tail -1
}
report() { # WHAT SMALL_LIST BIG_LIST COUNT
  local small big
  small=$(peak_kib "$2")
  big=$(peak_kib "$3")
  awk -v w="$1" -v s="$small" -v b="$big" -v n="$4" \
    'BEGIN { printf "%-34s peak %7.1f MiB (1,000 inputs: %5.1f MiB): %5.1f bytes per input\n", w, b / 1024, s / 1024, (b - s) * 1024 / (n - 1000) }'
}
seq 1 1000 | sed "s|^|$work/missing/|" >"$work/missing-small"
seq 1 "$n" | sed "s|^|$work/missing/|" >"$work/missing-big"
seq 1 1000 | sed "s|^|$work/in/img|; s|$|.png|" >"$work/img-small"
seq 1 "$n" | sed "s|^|$work/in/img|; s|$|.png|" >"$work/img-big"
echo "# crop-resize, one thread, $n inputs; budget: 100 bytes per input"
report "$n missing files" "$work/missing-small" "$work/missing-big" "$n"
report "$n images (each claims an output)" "$work/img-small" "$work/img-big" "$n"
