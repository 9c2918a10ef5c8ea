#!/usr/bin/env bash
# The main job on an embedded default, on the CPU (the GPU when there is one):
#  1. target images rendered from known latents by a tiny StyleGAN2-ADA generator (the upstream
#     snapshot pickle of ../shared's fixtures, converted without running its code, or without
#     ../shared one that generate --init-network makes: its weights are RANDOM, as are the
#     VGG16/LPIPS network's that convert-vgg16-lpips --random makes), in a folder of sub-folders;
#     shard-list --images | xargs -P (or GNU parallel) project-one-gpu | gather-npz; then how close
#     the recovered images are to the targets, against the starting point (w_avg);
#  2. a 2-rank ddp-train on the digits data through the CPU backend;
#  3. all-reduce-check --spawn 2.
# With real weights: scripts/convert-network-pkl YOUR.pkl -o G.safetensors and NVIDIA's vgg16.pt
# (or scripts/convert-vgg16-lpips), then the same commands (docs/projection.md).
#   scripts/demo.sh [OUT_DIR]   (default: out/demo; re-running skips finished work)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/out/demo}")
start=$(date +%s)
bash "$root/scripts/setup" >&2
# shellcheck source=/dev/null
source "$root/scripts/env.sh"
mkdir -p "$out"
cd "$out"
say() { printf '\n== %s\n' "$*" >&2; }
pkl=${SHARDKIT_SHARED:-$root/../shared}/fixtures/stylegan2/tiny-skip/network.pkl

say "networks: a tiny StyleGAN2-ADA generator (32x32) and a VGG16/LPIPS, both with RANDOM weights"
if [ ! -f G.safetensors ]; then
  if [ -f "$pkl" ]; then  # upstream's own snapshot pickle of a tiny network, converted
    python "$root/scripts/convert-network-pkl" "$pkl" -o G.safetensors | cut -c1-110 >&2
  else                    # without ../shared: the same shape, initialised here
    generate --init-network 0 --network G.safetensors | cut -c1-110 >&2
  fi
fi
[ -f vgg.safetensors ] || python "$root/scripts/convert-vgg16-lpips" --random 2 -o vgg.safetensors >/dev/null

say "targets: 12 images from known latents (seeds 0-11, truncation 0.7) in 3 sub-folders"
for d in 0 1 2; do
  [ -d "targets/set$d" ] || generate -q --network G.safetensors --seeds "$((4 * d))-$((4 * d + 3))" --trunc 0.7 -o "targets/set$d" >/dev/null
done
[ -f start.png ] || generate -q --network G.safetensors --seeds 0 --trunc 0 -o start >/dev/null

say "shard-list --images -n 3 --by-dir | (parallel | xargs -P 3) project-one-gpu | gather-npz"
shard-list --images targets -n 3 --by-dir >shards.jsonl
project=(project-one-gpu -q --network G.safetensors --vgg vgg.safetensors --steps 100 --w-avg-samples 2000 -b 4)
if command -v parallel >/dev/null 2>&1; then
  parallel --will-cite --halt now,fail=1 --line-buffer -j3 "${project[@]}" {} <shards.jsonl >latents.jsonl
else
  xargs -d '\n' -n 1 -P 3 "${project[@]}" <shards.jsonl >latents.jsonl
fi
gather-npz -q --overwrite -o latents.npz <latents.jsonl >/dev/null
generate -q --network G.safetensors -o projected <latents.jsonl >/dev/null
python - <<'PY'
import glob, json, numpy as np
from PIL import Image
f = np.load("latents.npz")
print(f"latents.npz: w {f['w'].shape} {f['w'].dtype}, names {f['names'][:2]} ...")
recs = [json.loads(l) for l in open("latents.jsonl") if '"type":"latent"' in l]
start = np.asarray(Image.open(glob.glob("start/*.png")[0]), np.float32)
before, after = [], []
for r in recs:
    t = np.asarray(Image.open(r["input"]), np.float32)
    p = np.asarray(Image.open("projected/" + r["input"]), np.float32)
    before.append(np.abs(t - start).mean()); after.append(np.abs(t - p).mean())
dist = [r["distance"] for r in recs if "distance" in r]  # absent for images a re-run skipped
lpips = f"final LPIPS distance {np.mean(dist):.3f} (random VGG)" if dist else "already projected (re-run)"
print(f"{len(recs)} images projected; mean |target - image| in 0..255 levels: "
      f"{np.mean(before):.1f} from w_avg -> {np.mean(after):.1f} after projection; {lpips}")
PY

say "ddp-train: ResNet-18 on scikit-learn's digits, 2 ranks through the CPU backend (tcp://)"
[ -f digits/train.bin ] || python "$root/scripts/make-digits-cifar" digits >/dev/null
port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
train=(ddp-train --data cifar100:digits --epochs 3 --batch-size 64 --lr 0.02 --augment --device cpu
       --init-method "tcp://127.0.0.1:$port" --world-size 2 --checkpoint-dir ck --dist-timeout-secs 60 -q)
"${train[@]}" --rank 1 >/dev/null &
"${train[@]}" --rank 0 | python -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r["type"] == "epoch":
        print("epoch %d: train loss %.3f, val top-1 %.1f %%, %.0f img/s, 2 ranks" % (r["epoch"], r["train_loss"], r["val_top1"], r["images_per_s"]))'
wait
echo "checkpoints: ck/last.safetensors loads into torchvision.models.resnet18(num_classes=10)" >&2

say "all-reduce-check --spawn 2 (the CPU ring, every element checked)"
all-reduce-check --spawn 2 --device cpu -b 1M -e 16M -f 4 -n 5 >/dev/null

say "done in $(($(date +%s) - start)) s: outputs in $out"
