#!/usr/bin/env bash
# Projecting images together vs one at a time: the same images with -b 1 and -b 4, each step's
# w kept (--save-trajectory), then the largest |Δw| at a few steps and the final distances.
#   scripts/bench/project_batch.sh [STEPS] [DEVICE]      (defaults 150 and cpu; ~1 min on 2 cores)
# The tiny test generator (32², skip, clamp) and a VGG16 with random weights.
set -euo pipefail
steps=${1:-150}
device=${2:-cpu}
# shellcheck source=scripts/bench/workdir.sh
source "$(dirname "$0")/workdir.sh"
g="$shared/fixtures/stylegan2/tiny-skip-clamp/G.safetensors"
"$bin/generate" -q --device cpu --network "$g" --seeds 1-4 --trunc 0.5 -o imgs >/dev/null
"$py" "$root/scripts/convert-vgg16-lpips" --random 1 -o vgg.safetensors >/dev/null
for b in 1 4; do
  "$bin/project-one-gpu" -q --device "$device" --network "$g" --vgg vgg.safetensors \
    --steps "$steps" --save-trajectory -b "$b" -o "b$b" imgs/*.png >"b$b.jsonl"
done
echo "device $device, $steps steps, 4 images: batch 1 vs batch 4"
"$py" - "$steps" <<'PY'
import glob, json, sys
import numpy as np
steps = int(sys.argv[1])
marks = [s for s in (1, 2, 5, 10, 25, 50, 100, 150, 300, 1000) if s <= steps]
print("image          " + " ".join(f"{'step ' + str(s):>10}" for s in marks) + "   w std   distance b1 / b4")
d1 = [json.loads(l)["distance"] for l in open("b1.jsonl") if '"latent"' in l]
d4 = [json.loads(l)["distance"] for l in open("b4.jsonl") if '"latent"' in l]
for i, f in enumerate(sorted(glob.glob("b1/imgs/*.npz"))):
    a = np.load(f)["w_steps"]
    b = np.load(f.replace("b1/", "b4/", 1))["w_steps"]
    d = np.abs(a - b).reshape(a.shape[0], -1).max(1)
    print(f"{f.split('/')[-1]:<14} " + " ".join(f"{d[s - 1]:>10.2e}" for s in marks)
          + f"   {a[-1].std():.3f}   {d1[i]:.4f} / {d4[i]:.4f}")
PY
