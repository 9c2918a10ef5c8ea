#!/usr/bin/env bash
# The main job on an embedded default: set-up (idempotent), then seed 000's data path over sample
# images this script makes itself:
#   find imgs | shard-list -n 4 --by-dir | (parallel | xargs -P 4) crop-resize  ->  per-image arrays
#   -> per-image vectors -> gather-npz -> one .npz that numpy loads;
# and a StyleGAN2-ADA network pickle -> scripts/convert-network-pkl -> generate -> PNGs.
# The projection step (project-one-gpu) joins this pipeline when it lands; until then the vectors
# gathered are the prepared images themselves, downsampled to 16x16 (a real, if simple, embedding).
#   scripts/demo.sh [OUT_DIR]   (default: out/demo; re-running skips finished work)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/out/demo}")
bash "$root/scripts/setup" >&2
# shellcheck source=/dev/null
source "$root/scripts/env.sh"
mkdir -p "$out"
cd "$out"
say() { printf '\n== %s\n' "$*" >&2; }

say "sample images (a folder of sub-folders, as seed 000 walks)"
[ -d imgs ] || python "$root/scripts/demo/make-sample-images.py" imgs 4 6

say "shard-list: 4 shards of whole directories"
find imgs -type f | sort | shard-list -n 4 --by-dir | tee shards.jsonl | cut -c1-110 >&2

say "crop-resize: one process per shard, 4 at a time, 256x256 (Pillow-exact Lanczos)"
if command -v parallel >/dev/null 2>&1; then
  parallel --will-cite --halt now,fail=1 --line-buffer -j4 crop-resize -q -r 256 -o prepared {} <shards.jsonl >prepared.jsonl
else
  xargs -d '\n' -n 1 -P 4 crop-resize -q -r 256 -o prepared <shards.jsonl >prepared.jsonl
fi
grep -c '"type":"image"' prepared.jsonl | xargs printf '%s images prepared under prepared/\n' >&2

say "per-image vectors (16x16 thumbnails through crop-resize --format npy, stored as w [1,3,256])"
grep '"type":"image"' prepared.jsonl | crop-resize -q -r 16 -o thumbs --format npy >thumbs.jsonl
python - <<'PY'
import json, os, numpy as np
for line in open("thumbs.jsonl"):
    r = json.loads(line)
    if r["type"] != "image":
        continue
    dst = os.path.splitext(r["output"])[0] + ".npz"
    if not os.path.exists(dst):
        a = np.load(r["output"]).astype(np.float32).reshape(1, 3, 256) / 127.5 - 1
        np.savez(dst + ".tmp.npz", w=a); os.replace(dst + ".tmp.npz", dst)
PY

say "gather-npz: every vector into one array"
find thumbs -name '*.npz' | sort | gather-npz --overwrite -o vectors.npz | tee gather.jsonl >&2
python -c "
import numpy as np
f = np.load('vectors.npz')
print('vectors.npz: w', f['w'].shape, f['w'].dtype, '| names', f['names'].shape, f['names'][:2])
"
say "generate: an upstream StyleGAN2-ADA snapshot pickle, converted without running its code, rendered"
pkl=$root/../shared/fixtures/stylegan2/tiny-skip/network.pkl
if [ -f "$pkl" ]; then
  [ -f G.safetensors ] || python "$root/scripts/convert-network-pkl" "$pkl" -o G.safetensors | cut -c1-110 >&2
  generate -q --network G.safetensors --seeds 0-7 --trunc 0.7 -o generated | tail -1 >&2
  echo "8 images (32x32, the tiny test network) under generated/" >&2
else
  echo "skipped: no ../shared/fixtures beside the checkout (convert your own network with scripts/convert-network-pkl)" >&2
fi

say "done: outputs in $out"
