#!/bin/sh
# The projection job with GNU parallel: one job per shard, GPUS at once; job slot {%} (1-based) maps to
# CUDA_VISIBLE_DEVICES={%}-1; --halt now,fail=1 stops everything at the first failed shard (outputs
# are atomic, so a re-run redoes only unfinished images); --joblog records every job. The photos
# are every image file under IMAGES that pack and ddp-train would take (shard-list --images).
#   IMAGES=photos NETWORK=G.safetensors VGG=vgg16.pt GPUS=4 sh examples/parallel.sh > latents.jsonl
# (Not run in CI: GNU parallel is not installed there. examples/xargs.sh is the tested twin.)
set -eu
: "${IMAGES:=imgs}" "${GPUS:=1}" "${NETWORK:=G.safetensors}" "${VGG:=vgg16.pt}" "${OUT:=out}" "${RES:=256}"
mkdir -p "$OUT"
shard-list --images "$IMAGES" -n "$GPUS" --by-dir \
  | parallel -j "$GPUS" --halt now,fail=1 --joblog "$OUT/joblog" --line-buffer \
      "CUDA_VISIBLE_DEVICES=\$(({%} - 1)) sh -c 'crop-resize -q -r $RES -o $OUT/prepared \"\$1\" | project-one-gpu -q --network $NETWORK --vgg $VGG' _ {}"
