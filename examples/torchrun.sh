#!/bin/sh
# One process per GPU under torchrun --no-python: the ranks join torchrun's own rendezvous store
# (no --master_port clash: --standalone picks a free port).
#   GPUS=8 DATA=cifar100:cifar-100-binary sh examples/torchrun.sh
set -eu
: "${GPUS:=1}" "${DATA:=synthetic}"
torchrun --no-python --standalone --nproc_per_node "$GPUS" all-reduce-check -b 8M -e 256M -f 2
torchrun --no-python --standalone --nproc_per_node "$GPUS" \
  ddp-train --data "$DATA" --epochs 200 --batch-size 512 --augment --checkpoint-dir ck --resume
