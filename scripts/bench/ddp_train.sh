#!/usr/bin/env bash
# ddp-train vs the same loop in plain PyTorch (scripts/reference/train_ref.py), one process.
#   scripts/bench/ddp_train.sh [DEVICE] [EPOCHS]      DEVICE: cpu (default) or cuda
# 1. Accuracy parity over SEEDS (3) seeds, both from the same torchvision initialisation: digits (scikit-learn's, as CIFAR-100 files by scripts/make-digits-cifar),
#    ResNet-18 (torchvision stem), SGD LR (0.02) momentum 0.9 wd 5e-4, cosine with 1 warm-up epoch,
#    (at LR=0.1 both implementations are chaotic on 1.4k images: single runs range 73-96%),
#    batch 64, augmentation; final val top-1 of each.
# 2. Throughput: CIFAR-100-shaped random files (32768 train, 1024 test images), ResNet-18, global
#    batch 128 and 512 (cuda) or 128 (cpu), in every precision and mode (eager / CUDA graphs);
#    PyTorch eager AMP, eager bf16 channels_last and (COMPILE=1, the default) torch.compile
#    reduce-overhead with fused SGD. Images/s of the last epoch's training steps.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
bin=$(cd "$bin" && pwd) # absolute: steps run in other directories
py=${PYTHON:-$root/.venv/bin/python}
device=${1:-cpu}
epochs=${2:-10}
work=${TMPDIR:-/tmp}/shardkit-bench-train
mkdir -p "$work"
[ -f "$work/digits/train.bin" ] || "$py" "$root/scripts/make-digits-cifar" "$work/digits" >/dev/null
[ -f "$work/shaped/train.bin" ] || "$py" - "$work/shaped" <<'PY'
import os, sys, numpy as np
d = sys.argv[1]; os.makedirs(d, exist_ok=True); rng = np.random.RandomState(0)
for name, n in [("train.bin", 32768), ("test.bin", 1024)]:
    lab = rng.randint(0, 100, size=(n, 1)).astype(np.uint8)
    np.concatenate([lab, lab, rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)], 1).tofile(f"{d}/{name}")
PY
last() {
  tail -n "${1:-1}" | python3 -c '
import sys, json
r = [json.loads(l) for l in sys.stdin if l.startswith("{") and json.loads(l)["type"] == "epoch"][-1]
print("%.2f %.1f" % (r["val_top1"], r["images_per_s"]))'
}
seeds=${SEEDS:-3} # 0 skips the parity runs (THROUGHPUT=0 the throughput runs)
if [ "$seeds" -gt 0 ]; then
  echo "# accuracy parity on digits, $epochs epochs, $device, seeds 0..$((seeds - 1)) (val top-1 %)"
  o_all=(); r_all=()
  for seed in $(seq 0 $((seeds - 1))); do
    # Both start from the same torchvision initialisation (torch's RNG differs from tch's).
    "$py" -c "import torch, torchvision, safetensors.torch as st; torch.manual_seed($seed); m = torchvision.models.resnet18(num_classes=10); st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, '$work/init$seed.safetensors')"
    common=(--epochs "$epochs" --batch-size 64 --lr "${LR:-0.02}" --schedule cosine:1 --augment --seed "$seed" --init "$work/init$seed.safetensors")
    o=$("$bin/ddp-train" --data "cifar100:$work/digits" "${common[@]}" --device "$device" --precision fp32 -q | last 2)
    r=$("$py" "$root/scripts/reference/train_ref.py" --data "cifar100:$work/digits" "${common[@]}" --device "$device" | last)
    echo "seed $seed: ddp-train ${o% *}  PyTorch ${r% *}"
    o_all+=("${o% *}"); r_all+=("${r% *}")
  done
  python3 -c '
import sys, statistics as st
n = len(sys.argv) // 2; o = list(map(float, sys.argv[1:n + 1])); r = list(map(float, sys.argv[n + 1:]))
sd = lambda v: st.stdev(v) if len(v) > 1 else 0.0
print("mean: ddp-train %.2f (sd %.2f)  PyTorch %.2f (sd %.2f)  difference %+.2f points" % (st.mean(o), sd(o), st.mean(r), sd(r), st.mean(o) - st.mean(r)))
' "${o_all[@]}" "${r_all[@]}"
fi
[ "${THROUGHPUT:-1}" = 1 ] || exit 0
echo "# throughput, ResNet-18 (torchvision stem), CIFAR-100-shaped data, $device, images/s of the training steps"
echo "# (last of 3 epochs; validation excluded), and in brackets of the whole epoch incl. validation on 1024 images"
tput() { # LABEL COMMAND...
  local label=$1; shift
  local r
  if r=$("$@" 2>"${TMPDIR:-/tmp}/tput.err" | python3 -c '
import sys, json
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
r = [x for x in r if x.get("type") == "epoch"][-1]
print("%9.0f  (%.0f)" % (r["train_images_per_s"], r["images_per_s"]))'); then
    printf '  %-44s %s\n' "$label" "$r"
  else
    printf '  %-44s failed: %s\n' "$label" "$(grep -v '^\[W' "${TMPDIR:-/tmp}/tput.err" | tail -3 | tr '\n' ' ')"
  fi
}
batches=(128); [ "$device" = cuda ] && batches=(128 512)
for b in "${batches[@]}"; do
  steps=$((16384 / b))
  [ "$steps" -lt 32 ] && steps=32
  [ "$device" = cpu ] && steps=8
  echo "batch $b ($steps steps per epoch):"
  common=(--data "cifar100:$work/shaped" --epochs 3 --max-steps "$steps" --batch-size "$b" --device "$device")
  if [ "$device" = cuda ]; then
    tput "ddp-train eager tf32, NCHW" "$bin/ddp-train" "${common[@]}" -q --precision tf32 --cuda-graphs off --channels-last off
    tput "ddp-train eager fp16 (the seeds' AMP), NCHW" "$bin/ddp-train" "${common[@]}" -q --precision fp16 --channels-last off
    tput "ddp-train eager bf16, channels_last" "$bin/ddp-train" "${common[@]}" -q --precision bf16 --cuda-graphs off
    for p in fp32 tf32 bf16; do
      tput "ddp-train CUDA graphs $p, channels_last" "$bin/ddp-train" "${common[@]}" -q --precision $p
    done
    # The same without PyTorch's fused optimiser kernel (the single-tensor SGD, four passes).
    tput "ddp-train CUDA graphs bf16, CL, unfused SGD" "$bin/ddp-train" "${common[@]}" -q --precision bf16 --fused-optim off
    tput "PyTorch eager fp16 AMP, NCHW" "$py" "$root/scripts/reference/train_ref.py" "${common[@]}" --precision fp16
    tput "PyTorch eager bf16, channels_last" "$py" "$root/scripts/reference/train_ref.py" "${common[@]}" --precision bf16 --channels-last
    if [ "${COMPILE:-1}" = 1 ]; then
      tput "PyTorch compile(reduce-overhead)+fused SGD bf16 CL" "$py" "$root/scripts/reference/train_ref.py" "${common[@]}" --precision bf16 --channels-last --compile
    fi
  else
    tput "ddp-train fp32" "$bin/ddp-train" "${common[@]}" -q --precision fp32
    tput "PyTorch fp32" "$py" "$root/scripts/reference/train_ref.py" "${common[@]}" --precision fp32
  fi
done
