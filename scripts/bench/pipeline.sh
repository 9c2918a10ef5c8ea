#!/usr/bin/env bash
# ddp-train's model parallelism (issue 22, seed 004): images/s of the training steps on one
# device, the naive split (--micro-batches 1) and the pipelined split (2, 4, 8, 16 micro-batches).
#   scripts/bench/pipeline.sh [cuda|cpu]
# Cases (PyTorch's model-parallel tutorial: ResNet-50, 128×128 images; and ResNet-18 on
# CIFAR-shaped data): ResNet-50 (torchvision stem) on synthetic 128×128 images, split at layer3
# (seed 004's cut) and balanced; ResNet-18 (CIFAR stem) on 32×32 images, balanced. Global batch
# BATCH (128: every M divides it), one rank, fp32 (--precision fp32: the tutorial's), eager
# steps for every row (a pipeline runs eagerly; the one-device row with CUDA graphs is printed
# for reference). Images/s of the last of EPOCHS (2) epochs of STEPS (20) steps, validation
# excluded. Stage devices: cuda:0,cuda:1 with two GPUs or more; cuda:0,cuda:0 with one (both
# stages on it: what the split itself costs); cpu,cpu on the CPU (defaults then BATCH=32,
# STEPS=2: a functional run, not a measurement of anything a CPU would pipeline).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
bin=$(cd "$bin" && pwd) # absolute: steps run in other directories
device=${1:-cuda}
if [ "$device" = cpu ]; then
  batch=${BATCH:-32}; steps=${STEPS:-2}; gpus=0
  one=cpu; two=cpu,cpu
else
  batch=${BATCH:-128}; steps=${STEPS:-20}
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$gpus" -ge 1 ] || { echo "no GPU visible (nvidia-smi -L); run with cpu" >&2; exit 1; }
  one=cuda:0
  if [ "$gpus" -ge 2 ]; then two=cuda:0,cuda:1; else two=cuda:0,cuda:0; fi
fi
epochs=${EPOCHS:-2}
echo "# ddp-train pipeline, $device ($gpus GPU(s) visible), global batch $batch, $steps steps × $epochs epochs, fp32"
echo "# images/s of the last epoch's training steps; stage devices $two"

# Runs ddp-train with ARGS; prints images/s and each stage's cut and memory.
tput() {
  local r
  if r=$("$bin/ddp-train" --epochs "$epochs" --max-steps "$steps" --batch-size "$batch" \
      --precision fp32 --seed 0 -q "$@" 2>"${TMPDIR:-/tmp}/pipeline.err" | python3 -c '
import sys, json
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
e = [x for x in r if x["type"] == "epoch"][-1]
cut = " | ".join("%s…%s %s%s" % (s["first"], s["last"], s["device"],
      " %d MiB" % s["peak_gpu_mib"] if s.get("peak_gpu_mib") is not None else "") for s in e.get("stages", []))
print("%8.1f  %6.1f ms/step  %s" % (e["train_images_per_s"], e["step_ms"], cut))'); then
    echo "$r"
  else
    echo "failed: $(tail -n 1 "${TMPDIR:-/tmp}/pipeline.err")"
  fi
}

bench() { # LABEL MODEL STEM DATA SPLIT...
  local label=$1 model=$2 stem=$3 data=$4; shift 4
  local common=(--model "$model" --stem "$stem" --data "$data")
  echo "## $label"
  printf '%-34s %s\n' "one device ($one), eager" "$(tput "${common[@]}" --device "$one" --cuda-graphs off)"
  if [ "$device" != cpu ]; then
    printf '%-34s %s\n' "one device ($one), CUDA graphs" "$(tput "${common[@]}" --device "$one" --cuda-graphs on)"
  fi
  for split in "$@"; do
    for m in 1 2 4 8 16; do
      [ $((batch % m)) -eq 0 ] || continue
      printf '%-34s %s\n' "split $split, M=$m" \
        "$(tput "${common[@]}" --stage-devices "$two" --split-at "$split" --micro-batches "$m")"
    done
  done
}

bench "ResNet-50, 128×128 (the tutorial's setting)" resnet50 imagenet synthetic:4096:128 layer3 balanced
bench "ResNet-18, CIFAR-shaped 32×32, CIFAR stem" resnet18 cifar synthetic:8192 balanced
