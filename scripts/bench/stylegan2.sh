#!/usr/bin/env bash
# Generator figures (issue 3): parity of every fixture tensor on each device, CPU time of one
# 32x32 synthesis and one forward+backward, and with CUDA the paper `stylegan2` config (random
# weights, 1024x1024 by default) forward+backward for batch 1 and 16, fp32 (TF32 convs, then
# strict fp32) and fp16 blocks, each case in its own process so its peak memory is its own;
# then each piece of a synthesis block timed alone (bench layers).
#   scripts/bench/stylegan2.sh [RES] [ITERS]
# On a machine without the Rust toolchain: SHARDKIT_BIN=DIR runs DIR/examples/bench, as
# scripts/gpu-bundle lays it out (see the example's header for its sub-commands).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
res=${1:-1024}
iters=${2:-10}
fixtures=${SHARDKIT_SHARED:-$root/../shared}/fixtures/stylegan2
bench=${SHARDKIT_BIN:-$root/target/release}/examples/bench
if [ -z "${SHARDKIT_BIN:-}" ] && [ -d "$root/.venv" ]; then
  # shellcheck source=/dev/null
  source "$root/scripts/env.sh"
  (cd "$root" && cargo build --release -q -p stylegan2 --examples)
fi
"$bench" parity cpu "$fixtures"
"$bench" fixture cpu "$fixtures/tiny-skip/G.safetensors" 50
if "$bench" parity cuda "$fixtures" 2>/dev/null; then
  NO_TF32=1 "$bench" parity cuda "$fixtures"
  "$bench" fixture cuda "$fixtures/tiny-skip/G.safetensors" 50
  for b in 1 16; do
    "$bench" paper cuda "$res" "$b" fp32 "$iters"
    NO_TF32=1 "$bench" paper cuda "$res" "$b" fp32 "$iters"
    "$bench" paper cuda "$res" "$b" fp16 "$iters"
  done
  "$bench" fp16-error cuda "$res"
  # Where a block's time goes (the projector's shapes: 1024 batch 16, 256 batch 32).
  "$bench" layers cuda 1024 16 fp16 "$iters"
  "$bench" layers cuda 256 32 fp16 "$iters"
else
  echo "no CUDA device: GPU cases skipped"
fi
