#!/usr/bin/env bash
# Processes side by side on the CPU: `shard-list -n 3 | xargs -P3 project-one-gpu --device cpu`
# as the README's projection job fans out, against the ideal (the same three shards run one
# after another with a thread each: their CPU time, spread over the cores), with libtorch's
# default pool in every process (the CPUs it may use) and with --threads 1.
#   scripts/bench/fanout.sh [IMAGES] [STEPS]      (defaults 6 and 20; minutes on 2 cores)
#   LOAD=N: N busy loops run in the background all along (other work on the machine).
# The tiny test generator and a VGG16 with random weights (the LPIPS distance's compute).
set -euo pipefail
images=${1:-6}
steps=${2:-20}
# shellcheck source=scripts/bench/workdir.sh
source "$(dirname "$0")/workdir.sh"
g="$shared/fixtures/stylegan2/tiny-skip/G.safetensors"
"$bin/generate" -q --device cpu --network "$g" --seeds "0-$((images - 1))" --trunc 0.7 -o targets >/dev/null
"$py" "$root/scripts/convert-vgg16-lpips" --random 2 -o vgg.safetensors >/dev/null
find targets -name '*.png' | sort >targets.txt
"$bin/shard-list" -n 3 <targets.txt >shards.jsonl
cpus=$(nproc)
load=${LOAD:-0}
busy=()
for ((i = 0; i < load; i++)); do
  sh -c 'while :; do :; done' &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null; rm -rf "$work"' EXIT
# ./project OUT [FLAGS...] RECORD: one shard's projection into OUT.
printf '#!/bin/sh\nout=$1; shift\nexec "%s" -q --device cpu --network "%s" --vgg vgg.safetensors --steps %s --w-avg-samples 200 -b 1 -o "$out" "$@"\n' \
  "$bin/project-one-gpu" "$g" "$steps" >project
chmod +x project
seconds() { # COMMAND...: wall seconds (the command must succeed)
  local t0
  t0=$(date +%s.%N)
  "$@" >/dev/null || { echo "fanout.sh: failed: $*" >&2; exit 1; }
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'
}
one_by_one=$(seconds sh -c 'while read -r s; do ./project seq --threads 1 "$s" || exit 1; done <shards.jsonl')
ideal=$(awk -v t="$one_by_one" -v c="$cpus" 'BEGIN { printf "%.2f", t / (c < 3 ? c : 3) }')
default=$(seconds xargs -d '\n' -n1 -P3 ./project def <shards.jsonl)
one=$(seconds xargs -d '\n' -n1 -P3 ./project one --threads 1 <shards.jsonl)
omp=$(seconds env OMP_NUM_THREADS=1 xargs -d '\n' -n1 -P3 ./project omp <shards.jsonl)
par=
if command -v parallel >/dev/null 2>&1; then
  par=$(seconds parallel --will-cite -j3 ./project par <shards.jsonl)
fi
# One shard alone: the default (every CPU it may use, as no sibling runs) against one thread.
first=$(head -n 1 shards.jsonl)
alone=$(seconds ./project alone "$first")
alone1=$(seconds ./project alone1 --threads 1 "$first")
alone_all=$(seconds ./project alone_all --threads "$cpus" "$first")
echo "# $images images in 3 shards, $steps steps, $cpus CPU(s), $load busy loop(s) beside; ideal: the shards one after another with a thread each ($one_by_one s) / min(CPUs, 3)"
printf '%-36s %8s %8s\n' case seconds "x ideal"
rows=("ideal:$ideal" "xargs -P3, default threads:$default" "xargs -P3, --threads 1:$one"
  "xargs -P3, OMP_NUM_THREADS=1:$omp")
[ -n "$par" ] && rows+=("parallel -j3, default threads:$par")
for row in "${rows[@]}"; do
  name=${row%:*} s=${row##*:}
  printf '%-36s %8.1f %8.2f\n' "$name" "$s" "$(awk -v s="$s" -v i="$ideal" 'BEGIN { print s / i }')"
done
echo "# one shard alone: default threads $alone s, --threads 1 $alone1 s ($(awk -v a="$alone" -v b="$alone1" 'BEGIN { printf "%.2f", b / a }')x), --threads $cpus (every CPU) $alone_all s"
