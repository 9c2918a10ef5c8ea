"""PyTorch's own loader over an epoch whose last batch is smaller: DistributedSampler (padded,
shuffled, seeded as ddp-train seeds it) and DataLoader(drop_last=False), training a TorchScript
module with torch.optim's SGD, as one process or as DistributedDataParallel over gloo.

  last_batch_ref.py MODEL.pt DATASET.npz OUT.safetensors SEED LR EPOCHS BATCH WORLD PORT

DATASET.npz holds `images` (float32 [N,3,H,W], as ddp-train's loader gives them) and `labels`
(ddp-train --dump-batches of a one-rank, unshuffled epoch). WORLD processes (1: no process
group) each take DistributedSampler(num_replicas=WORLD, rank=r, shuffle=True, seed=SEED),
set_epoch(e), and a DataLoader of BATCH // WORLD a step that keeps its last batch; rank 0
writes the module's state_dict to OUT.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def run(rank, model, data, out, seed, lr, epochs, batch, world, port):
    torch.set_num_threads(1)
    if world > 1:
        import torch.distributed as dist

        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    d = np.load(data)
    dataset = TensorDataset(torch.from_numpy(d["images"]), torch.from_numpy(d["labels"]).long())
    m = torch.jit.load(model)
    m.train()
    net = m if world == 1 else torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch // world, sampler=sampler, drop_last=False)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    if rank == 0:
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous() for k, v in m.state_dict().items()}, out)
    if world > 1:
        dist.destroy_process_group()


def main():
    model, data, out = sys.argv[1:4]
    seed, lr, epochs, batch, world, port = (
        int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]),
        int(sys.argv[8]), int(sys.argv[9]))
    args = (model, data, out, seed, lr, epochs, batch, world, port)
    if world == 1:
        run(0, *args)
    else:
        import torch.multiprocessing as mp

        mp.spawn(run, args=args, nprocs=world)


if __name__ == "__main__":
    main()
