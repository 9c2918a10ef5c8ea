#!/bin/sh
# The projection job with xargs: one project-one-gpu per shard, P at once; job slot s (0-based,
# --process-slot-var) runs on GPU (s mod GPUS). Each shard's records go to their own file, then
# gather-npz joins them, each w named by its photo. The photos are every image file under IMAGES
# that pack and ddp-train would take (shard-list --images: any case of .jpg .png .tif .webp ...).
# Exit status: xargs' (123 if any shard failed, as xargs reports a command that exited 1-125).
#   IMAGES=photos NETWORK=G.safetensors VGG=vgg16.pt GPUS=4 sh examples/xargs.sh
set -eu
: "${IMAGES:=imgs}" "${SHARDS:=4}" "${GPUS:=1}" "${NETWORK:=G.safetensors}" "${VGG:=vgg16.pt}"
: "${OUT:=out}" "${RES:=256}" "${STEPS:=150}" "${DEVICE:=auto}" "${PROJECT_FLAGS:=}"
export NETWORK VGG OUT RES STEPS DEVICE PROJECT_FLAGS GPUS
mkdir -p "$OUT"
shard-list --images "$IMAGES" -n "$SHARDS" --by-dir \
  | xargs -d '\n' -n 1 -P "$SHARDS" --process-slot-var=SLOT sh -c '
      n=$(printf "%s" "$1" | sed -n "s/.*\"shard\":\([0-9]*\).*/\1/p")
      export CUDA_VISIBLE_DEVICES=$((SLOT % GPUS))
      crop-resize -q -r "$RES" -o "$OUT/prepared" "$1" \
        | project-one-gpu -q --device "$DEVICE" --network "$NETWORK" --vgg "$VGG" --steps "$STEPS" $PROJECT_FLAGS \
        > "$OUT/shard-$n.jsonl.partial"
      mv "$OUT/shard-$n.jsonl.partial" "$OUT/shard-$n.jsonl"' _
cat "$OUT"/shard-*.jsonl | gather-npz -q --overwrite -o "$OUT/latents.npz" > /dev/null
echo "$OUT/latents.npz"
