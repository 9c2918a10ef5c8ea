#!/usr/bin/env bash
# ddp-train's own ResNet-18 against the same network as a TorchScript file (torchvision's
# resnet18 through torch.jit.script), trained side by side on the same synthetic data, ROUNDS
# alternating rounds: training images/s of each (the epoch record's train_images_per_s) and their
# ratio (medians).
#   scripts/bench/torchscript.sh [DEVICE (cpu)] [ROUNDS (3)]
# Environment: IMAGES (2048), SIZE (32), BATCH (64), THREADS (all CPUs), EXTRA (more flags, e.g.
# "--precision bf16" on a GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
py=${PYTHON:-$root/.venv/bin/python}
device=${1:-cpu}
rounds=${2:-3}
images=${IMAGES:-2048} size=${SIZE:-32} batch=${BATCH:-64}
threads=${THREADS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" - "$work/r18.pt" <<'PY'
import sys, torch, torchvision
torch.manual_seed(0)
torch.jit.save(torch.jit.script(torchvision.models.resnet18(num_classes=100)), sys.argv[1])
PY
speed() {
  # shellcheck disable=SC2086
  "$bin/ddp-train" --device "$device" --data "synthetic:$images:$size" --epochs 1 \
    --batch-size "$batch" --max-val-steps 1 --threads "$threads" -q --model "$1" ${EXTRA:-} |
    python3 -c 'import sys, json
print([json.loads(l) for l in sys.stdin if json.loads(l)["type"] == "epoch"][-1]["train_images_per_s"])'
}
own=() script=()
for r in $(seq "$rounds"); do
  own+=("$(speed resnet18)")
  script+=("$(speed "torchscript:$work/r18.pt")")
  echo "round $r: resnet18 ${own[-1]} images/s, torchscript ${script[-1]} images/s"
done
python3 - "${own[*]}" "${script[*]}" <<'PY'
import statistics, sys
own = statistics.median(map(float, sys.argv[1].split()))
script = statistics.median(map(float, sys.argv[2].split()))
print(f"median: --model resnet18 {own:.1f} images/s, torchscript:resnet18 {script:.1f} images/s, "
      f"TorchScript / own {script / own:.3f}")
PY
