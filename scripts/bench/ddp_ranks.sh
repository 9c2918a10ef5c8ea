#!/usr/bin/env bash
# ddp-train with several ranks on this host (CPU) vs PyTorch DDP over gloo, on the same batches.
#   scripts/bench/ddp_ranks.sh [RANKS] [STEPS] [ROUNDS]      defaults: 4 ranks, 6 steps, 2 rounds
# ResNet-18 (torchvision's), CIFAR-100-shaped random data (2048 images), global batch
# BATCH (64: 16 per rank), SGD momentum 0.9, fp32, one compute thread per rank (as torchrun's
# OMP_NUM_THREADS=1). Each run trains 2 epochs of STEPS steps; the figure is the second epoch's
# mean step time (rank 0's; the first epoch is the warm-up). ddp-train runs once with
# --transport shm (shared memory) and once with tcp (the TCP ring); PyTorch runs
# DistributedDataParallel(backend="gloo") started by torch.multiprocessing, the same model, data
# and batch. Each round runs the three in a rotated order; the table holds medians over rounds.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
bin=$(cd "$bin" && pwd)
py=${PYTHON:-$root/.venv/bin/python}
ranks=${1:-4}
steps=${2:-6}
rounds=${3:-2}
batch=${BATCH:-64}
work=${TMPDIR:-/tmp}/shardkit-bench-ddp-ranks
mkdir -p "$work"
[ -f "$work/shaped/train.bin" ] || "$py" - "$work/shaped" <<'PY'
import os, sys, numpy as np
d = sys.argv[1]; os.makedirs(d, exist_ok=True); rng = np.random.RandomState(0)
for name, n in [("train.bin", 2048), ("test.bin", 256)]:
    lab = rng.randint(0, 100, size=(n, 1)).astype(np.uint8)
    np.concatenate([lab, lab, rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)], 1).tofile(f"{d}/{name}")
PY
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

ours() { # TRANSPORT: rank 0's second-epoch step_ms
  local port; port=$(free_port)
  local pids=() r
  for r in $(seq 1 $((ranks - 1))); do
    RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      "$bin/ddp-train" --device cpu --data "cifar100:$work/shaped" --epochs 2 --max-steps "$steps" \
      --max-val-steps 1 --batch-size "$batch" --lr 0.02 --precision fp32 --threads 1 \
      --transport "$1" -q >/dev/null &
    pids+=($!)
  done
  RANK=0 WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    "$bin/ddp-train" --device cpu --data "cifar100:$work/shaped" --epochs 2 --max-steps "$steps" \
    --max-val-steps 1 --batch-size "$batch" --lr 0.02 --precision fp32 --threads 1 \
    --transport "$1" -q | python3 -c '
import sys, json
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print("%.1f" % [x for x in r if x.get("type") == "epoch"][-1]["step_ms"])'
  for p in "${pids[@]}"; do wait "$p"; done
}

# The PyTorch loop, in a file: torch.multiprocessing's spawn imports the main module by path.
cat >"$work/torch_ddp.py" <<'PY'
import sys, time, numpy as np, torch, torch.distributed as dist, torch.multiprocessing as mp
import torchvision

def worker(rank, d, world, steps, batch, port, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    raw = np.fromfile(f"{d}/train.bin", dtype=np.uint8).reshape(-1, 3074)
    x = torch.from_numpy(raw[:, 2:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0)
    y = torch.from_numpy(raw[:, 1].astype(np.int64))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet18(num_classes=100))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    per = batch // world
    times = []
    for epoch in range(2):
        for s in range(steps):
            i = (s * batch + rank * per) % (len(x) - per)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[i:i + per]), y[i:i + per]).backward()
            opt.step()
            if epoch == 1:
                times.append(time.perf_counter() - t0)
    if rank == 0:
        q.put(1e3 * sum(times) / len(times))
    dist.destroy_process_group()

if __name__ == "__main__":
    d, world, steps, batch, port = sys.argv[1], *map(int, sys.argv[2:])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, d, world, steps, batch, port, q)) for r in range(world)]
    for p in ps:
        p.start()
    print("%.1f" % q.get(timeout=600))
    for p in ps:
        p.join()
PY
torch_ddp() { # rank 0's mean step time of the second epoch, ms
  timeout 900 "$py" "$work/torch_ddp.py" "$work/shaped" "$ranks" "$steps" "$batch" "$(free_port)"
}

declare -A got=([shm]="" [tcp]="" [gloo]="")
impls=(shm tcp gloo)
for round in $(seq 1 "$rounds"); do
  k=$(( (round - 1) % 3 ))
  for impl in "${impls[@]:$k}" "${impls[@]:0:$k}"; do
    case $impl in
      gloo) t=$(torch_ddp) ;;
      *) t=$(ours "$impl") ;;
    esac
    got[$impl]+="$t "
    echo "# round $round: $impl $t ms/step (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  done
done
python3 - "$ranks" "$batch" "${got[shm]}" "${got[tcp]}" "${got[gloo]}" <<'PY'
import sys, statistics as st
ranks, batch = sys.argv[1], sys.argv[2]
shm, tcp, gloo = (st.median(map(float, a.split())) for a in sys.argv[3:6])
print(f"ResNet-18, {ranks} ranks on the CPU, global batch {batch}: ms per step (median over rounds)")
print(f"  ddp-train --transport shm  {shm:8.1f}   PyTorch DDP gloo / this: {gloo / shm:.2f}x")
print(f"  ddp-train --transport tcp  {tcp:8.1f}   PyTorch DDP gloo / this: {gloo / tcp:.2f}x")
print(f"  PyTorch DDP (gloo)         {gloo:8.1f}")
PY
