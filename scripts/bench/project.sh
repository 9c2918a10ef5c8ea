#!/usr/bin/env bash
# Projection throughput (issue 4): the paper `stylegan2` generator with random weights and a
# VGG16 with random weights (the compute of the pretrained ones), targets rendered by the same
# generator, 150 steps, one process per case (so each case's peak memory is its own).
#   scripts/bench/project.sh [STEPS]        RESOLUTIONS="256" for one resolution (each takes minutes)
# Without CUDA it runs small CPU cases (32x32, 64x64). Upstream on an H100: 17.6 s/img at 1024,
# 13.3 s/img at 256 (NOTES.md). SHARDKIT_BIN=DIR: use DIR/examples/bench_project, built elsewhere
# (scripts/gpu-bundle), instead of building it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-150}
resolutions=${RESOLUTIONS:-256 1024}
if [ -z "${SHARDKIT_BIN:-}" ] && [ -d "$root/.venv" ]; then
  # shellcheck source=/dev/null
  source "$root/scripts/env.sh"
  (cd "$root" && cargo build --release -q -p projector --examples)
fi
b=${SHARDKIT_BIN:-$root/target/release}/examples/bench_project
if "$b" cuda 32 1 1 >/dev/null 2>&1; then
  # Default op sequence (stylegan2::fast + the fused epilogue), then upstream's reference ops,
  # then the CUDA-graph mode (GRAPH=1; ~3x the memory); PARTS=1 adds the time of each piece.
  for res in $resolutions; do
    for batch in 1 8 16 32; do "$b" cuda $res $batch "$steps" || echo "res $res batch $batch failed (memory?)"; done
    [ $res = 256 ] && "$b" cuda 256 64 "$steps"
    "$b" cuda $res 16 "$steps" tf32 unfused
    # The up-sampling convolution fixed each way (the default times both per shape, picks one).
    for up in phase tconv; do KERNEL_CHOICES=upconv=$up "$b" cuda $res 16 "$steps"; done
    # The VGG's layout fixed each way, with the parts' times (the default times both, picks one).
    for l in nchw nhwc; do KERNEL_CHOICES=vgg-layout=$l PARTS=1 "$b" cuda $res 16 "$steps"; done
    GRAPH=1 "$b" cuda $res 16 "$steps"
  done
  if [[ " $resolutions " == *" 256 "* ]]; then "$b" cuda 256 32 "$steps" bf16; fi
else
  for res in 32 64; do for batch in 1 4; do "$b" cpu $res $batch 10; done; done
fi
