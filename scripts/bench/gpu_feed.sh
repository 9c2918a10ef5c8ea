#!/usr/bin/env bash
# Does the image loader keep a GPU fed? ResNet-50 at 224², bf16, batch BATCH (256), trained
# from data already in device memory (synthetic) and from JPEGs through the loader
# (`--transform imagenet`: RandomResizedCrop + flip, decoded by --workers threads into pinned
# memory, copied on a side stream), with the node's cores and half of them as workers. Prints
# images/s of the last epoch's training steps and the loader's share of the in-memory rate.
#   scripts/bench/gpu_feed.sh [DIR] [COPIES]
# DIR: an image folder with train/ and val/ (default: image_loader.py's 512 JPEGs cut from real
# photos, made with the venv's Pillow). Its train images are hard-linked COPIES (32) times into a
# work folder (nested folders inside each class, which ImageFolder walks), so that an epoch is
# long enough for the refill at its start not to count. On a machine without the venv (a lent
# GPU), make the folder here and carry it: scripts/gpu-bundle, then SHARDKIT_BIN=.gpu/bin there.
# DEVICE=cpu BATCH=4 on a small folder: a functional run (fp32), not a measurement.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
bin=$(cd "$bin" && pwd)
device=${DEVICE:-cuda}
batch=${BATCH:-256}
precision=$([ "$device" = cpu ] && echo fp32 || echo bf16) # bf16 autocast is CUDA-only
dir=${1:-}
copies=${2:-32}
if [ -z "$dir" ]; then
  dir=${TMPDIR:-/tmp}/shardkit-bench-loader
  "$root/.venv/bin/python" - "$dir" "$root/scripts/bench" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[2])
from crop_resize_photos import fetch
from image_loader import make_set
photos = [p for f in ("JPEG", "PNG", "WEBP") for p, _ in fetch(os.path.expanduser("~/.cache/shardkit-bench/wallpapers"))[f]]
make_set(photos, sys.argv[1], 512)
PY
fi
[ -d "$dir/train" ] && [ -d "$dir/val" ] || { echo "gpu_feed: $dir needs train/ and val/ image folders" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-feed.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/set/train"
ln -s "$(cd "$dir/val" && pwd)" "$work/set/val"
for class in "$dir"/train/*/; do
  c=$(basename "$class")
  mkdir -p "$work/set/train/$c"
  for k in $(seq "$copies"); do cp -al "$class" "$work/set/train/$c/copy$k"; done
done
images=$(find -L "$work/set/train" -type f | wc -l)
cores=$(nproc)
common=(--device "$device" --model resnet50 --precision "$precision" --batch-size "$batch" --epochs 2 --lr 0.01 -q)
rate() { # ARGS...: images/s of the last epoch's training steps
  "$bin/ddp-train" "${common[@]}" "$@" | grep '"type":"epoch"' | tail -1 |
    grep -o '"train_images_per_s":[0-9.]*' | cut -d: -f2
}
echo "# ResNet-50 224² $precision batch $batch on $device, $cores cores, $images training images per epoch"
mem=$(rate --data "synthetic:$((images < 4096 ? images : 4096)):224") # 2.3 GiB at most
printf '%-44s %8.0f images/s\n' "data in device memory (synthetic)" "$mem"
for w in "$cores" $((cores / 2)); do
  [ "$w" -ge 1 ] || continue
  got=$(rate --data "imagefolder:$work/set" --image-size 224 --transform imagenet --workers "$w")
  printf '%-44s %8.0f images/s  (%.0f %% of in memory)\n' "loader, imagenet transform, $w workers" "$got" \
    "$(awk -v a="$got" -v b="$mem" 'BEGIN { print 100 * a / b }')"
done
