#!/usr/bin/env python3
"""The training loop ddp-train runs, written in plain PyTorch (one process), for accuracy and
throughput parity: torchvision's ResNet, the CIFAR binary files held on the device, torch's
DistributedSampler order (world 1: randperm seeded with seed+epoch), torch.optim.SGD/AdamW, the
same LR schedule per step, cross-entropy with label smoothing, the same on-device augmentation
(random crop with zero padding 4 + horizontal flip) and normalisation (train-set mean/std).

  .venv/bin/python scripts/reference/train_ref.py --data cifar100:DIR [--epochs 10] [--batch-size 128]
      [--lr 0.1] [--schedule cosine:1] [--augment] [--max-steps N] [--device cpu|cuda]
      [--precision fp32|tf32|bf16|fp16] [--channels-last] [--init STATE.safetensors]

Prints one JSON line per epoch, like ddp-train's epoch records.
"""
import argparse, glob, json, math, os, time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision


def load(spec, device):
    kind, d = spec.split(":", 1)
    if kind == "cifar100":
        files, lb, at = ([f"{d}/train.bin"], [f"{d}/test.bin"]), 2, 1
    elif kind == "cifar10":
        files, lb, at = ([f"{d}/data_batch_{i}.bin" for i in range(1, 6)], [f"{d}/test_batch.bin"]), 1, 0
    else:
        raise SystemExit(f"unknown --data {spec}")

    def read(paths):
        raw = np.concatenate([np.fromfile(p, dtype=np.uint8) for p in paths]).reshape(-1, lb + 3072)
        x = torch.from_numpy(raw[:, lb:].reshape(-1, 3, 32, 32).copy()).to(device)
        y = torch.from_numpy(raw[:, at].astype(np.int64)).to(device)
        return x, y

    tr, te = read(files[0]), read(files[1])
    classes = int(max(tr[1].max(), te[1].max())) + 1 if kind == "cifar100" else 10
    return tr, te, classes


def lr_at(sched, lr, epoch, epochs):
    parts = sched.split(":")
    if parts[0] == "constant":
        return lr
    if parts[0] == "step":
        return lr * float(parts[2]) ** math.floor(epoch / float(parts[1]))
    w = float(parts[1]) if len(parts) > 1 else 0.0
    if epoch < w:
        return lr * max(epoch, w * 1e-3) / w
    t = min(max((epoch - w) / max(epochs - w, 1e-9), 0.0), 1.0)
    return lr * 0.5 * (1 + math.cos(math.pi * t))


def step_seed(seed, epoch, step, rank=0):
    """The generator's seed for a step's augmentation draws, as ddp-train seeds its steps
    (a function of the seed, epoch, step and rank only: runs resumed at any step draw the same)."""
    return ((seed * 1_000_003 + epoch * 1009 + rank) * 1_000_033 + step) % (1 << 64)


def augment(x):
    b, c, h, w = x.shape
    p = F.pad(x, (4, 4, 4, 4))
    dy = torch.randint(0, 9, (b,), device=x.device)
    dx = torch.randint(0, 9, (b,), device=x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device)[None]).view(b, 1, h, 1).expand(b, c, h, w + 8)
    y = p.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w, device=x.device)[None]).view(b, 1, 1, w).expand(b, c, h, w)
    y = y.gather(3, cols)
    flip = (torch.rand(b, device=x.device) < 0.5).view(b, 1, 1, 1)
    return torch.where(flip, y.flip(3), y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--schedule", default="cosine:1")
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    ap.add_argument("--augment", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile(mode='reduce-overhead') (CUDA graphs) and fused SGD: the issue's fastest anchor")
    ap.add_argument("--init", help="start from this state_dict (safetensors)")
    ap.add_argument("--save", help="write the final state_dict here (safetensors)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
    (xtr, ytr), (xte, yte), classes = load(a.data, dev)
    xf = xtr.float() / 255
    mean, std = xf.mean((0, 2, 3), keepdim=True), xf.std((0, 2, 3), keepdim=True)
    del xf
    torch.manual_seed(a.seed)
    model = getattr(torchvision.models, a.model)(num_classes=classes)
    if a.init:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(a.init))
    model = model.to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    params = list(model.parameters())
    if a.compile:
        model = torch.compile(model, mode="reduce-overhead")
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay,
                              **({"fused": True} if a.compile else {}))
    else:
        opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.weight_decay)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.amp.GradScaler(enabled=a.precision == "fp16")
    n = len(ytr)
    steps = n // a.batch_size if a.max_steps is None else min(a.max_steps, n // a.batch_size)
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        g = torch.Generator()
        g.manual_seed(a.seed + epoch)
        order = torch.randperm(n, generator=g).to(dev)
        model.train()
        loss_sum, correct = torch.zeros((), device=dev), torch.zeros((), device=dev, dtype=torch.long)
        for s in range(steps):
            lr = lr_at(a.schedule, a.lr, epoch + s / steps, a.epochs)
            for grp in opt.param_groups:
                grp["lr"] = lr
            torch.manual_seed(step_seed(a.seed, epoch, s))
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]
            x = xtr[idx].float() / 255
            if a.augment:
                x = augment(x)
            x, y = (x - mean) / std, ytr[idx]
            if a.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if a.compile:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=a.label_smoothing)
            # Under torch.compile's CUDA graphs the gradients are graph outputs: drop them.
            opt.zero_grad(set_to_none=a.compile)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(1) == y).sum()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_secs = time.perf_counter() - t0
        model.eval()
        vl, vc = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(yte), 2 * a.batch_size):
                x = (xte[i:i + 2 * a.batch_size].float() / 255 - mean) / std
                if a.compile:
                    torch.compiler.cudagraph_mark_step_begin()
                lo = model(x).float()
                vl += F.cross_entropy(lo, yte[i:i + 2 * a.batch_size], reduction="sum").item()
                vc += (lo.argmax(1) == yte[i:i + 2 * a.batch_size]).sum().item()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        seen = steps * a.batch_size
        print(json.dumps(dict(type="epoch", epoch=epoch + 1, train_loss=loss_sum.item() / seen,
                              train_top1=100 * correct.item() / seen, val_loss=vl / len(yte),
                              val_top1=100 * vc / len(yte), images_per_s=seen / secs,
                              train_images_per_s=seen / train_secs, seconds=secs, lr=lr)), flush=True)
    if a.save:
        from safetensors.torch import save_file
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, a.save)


if __name__ == "__main__":
    main()
