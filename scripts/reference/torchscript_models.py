"""Small models that stress a trainer differently, scripted with torch.jit.script, and a
reference trainer for them: ddp-train's `--model torchscript:FILE` parity tests train the same
file on the same batches (ddp-train's --dump-batches) with torch.optim and compare weights.

  torchscript_models.py make KIND OUT.pt CLASSES [SEED]
      # KIND: gn_dropout, vit, bn, tied (models to train); detached, train_shape, raises,
      # unused, no_params, mutates, adds_one, int_logits, nan_logits, narrow, two_rows (broken
      # or hostile ones, for the tests)
  torchscript_models.py train [OPTION...] MODEL.pt OUT.safetensors SEED LR STEPS ACCUM BATCHES.npz...
      # each npz is one rank's batches (ddp-train --dump-batches STEPS*... per rank); options
      # (ddp-train's flags of the same names): --optimizer=adamw, --label-smoothing=EPS,
      # --init=STATE_DICT.safetensors, --channels-last
  torchscript_models.py ddp MODEL.pt OUT.safetensors SEED LR STEPS PORT BATCHES.npz...
      # the same with PyTorch's DistributedDataParallel over gloo, one process per rank
      # (one npz each), on 127.0.0.1:PORT; rank 0 writes OUT
  torchscript_models.py state MODEL.pt OUT.safetensors
      # the module's state_dict as safetensors.torch.save_file writes it (an --init file)
  torchscript_models.py eager KIND CLASSES CHECKPOINT.safetensors SNIPPET.py
      # the checkpoint loads strictly into the eager module, which computes what the
      # snippet's model (torch.jit.load + the checkpoint) computes
  torchscript_models.py each CALLS.json
      # the calls above, each a JSON list of the arguments after the script's name, in one
      # process (each start that imports torch costs seconds); the `ddp` calls run last, all
      # in the same rank processes, one per rank (so they must have as many ranks each)

`train` runs what ddp-train runs (SGD, momentum 0.9, weight decay 5e-4, constant LR, or AdamW
with betas 0.9, 0.999, eps 1e-8 and the same weight decay on every parameter; DDP's
semantics emulated in one process for several ranks: rank 0's buffers are the ones kept (DDP
broadcasts them before every forward), gradients averaged over ranks and micro-batches; dropout seeded before each
micro-batch's forward as ddp-train seeds it).
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GnDropout(nn.Module):
    """Convolutions with GroupNorm and dropout: no buffers, random draws in training."""

    def __init__(self, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.gn1 = nn.GroupNorm(4, 16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.gn2 = nn.GroupNorm(8, 32)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = F.relu(self.gn1(self.conv1(x)))
        x = F.relu(self.gn2(self.conv2(x)))
        x = x.mean(dim=(2, 3))
        return self.fc(self.drop(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """A vision transformer: patch embedding, class token, position embedding, attention
    blocks with LayerNorm and GELU."""

    def __init__(self, classes: int, size: int = 32, patch: int = 8, dim: int = 32):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(Block(dim, 4), Block(dim, 4))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.blocks(x)
        return self.head(self.norm(x[:, 0]))


class BnNet(nn.Module):
    """Convolutions with BatchNorm: running statistics as buffers."""

    def __init__(self, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, classes)

    def features(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return x.mean(dim=(2, 3))

    def forward(self, x):
        return self.fc(self.features(x))


class DigitsNet(nn.Module):
    """Two strided convolutions with BatchNorm and a 4x4 pooled head: learns 32x32 digits to
    over 90 % top-1 in 48 steps of 32 on one CPU thread in about a second (ResNet-18: 45 % in
    ten), for the tests that need a run to learn rather than a particular network."""

    def __init__(self, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 4).flatten(1))


class Detached(nn.Module):
    """A broken model for the tests: its output depends on no parameter."""

    def __init__(self, classes: int):
        super().__init__()
        self.net = BnNet(classes)

    def forward(self, x):
        return self.net(x).detach()


class TrainShape(nn.Module):
    """A broken model for the tests: five logits in training mode, the classes in evaluation."""

    def __init__(self, classes: int):
        super().__init__()
        self.net = BnNet(classes)

    def forward(self, x):
        y = self.net(x)
        if self.training:
            return y[:, :5]
        return y


class Raises(nn.Module):
    """A broken model for the tests: its forward raises in training mode."""

    def __init__(self, classes: int):
        super().__init__()
        self.net = BnNet(classes)

    def forward(self, x):
        if self.training:
            raise RuntimeError("boom from forward")
        return self.net(x)


class Unused(nn.Module):
    """A broken model for the tests: a layer its forward never uses."""

    def __init__(self, classes: int):
        super().__init__()
        self.net = BnNet(classes)
        self.extra = nn.Linear(3, 3)

    def forward(self, x):
        return self.net(x)


class NoParams(nn.Module):
    """A broken model for the tests: no parameters at all (a fixed projection as a buffer)."""

    def __init__(self, classes: int):
        super().__init__()
        self.register_buffer("proj", torch.randn(3, classes))

    def forward(self, x):
        return x.mean(dim=(2, 3)) @ self.proj


class Tied(nn.Module):
    """Weight tying (as language models tie their embedding and output layer): two layers
    sharing one weight, which the state_dict lists under both names."""

    def __init__(self, classes: int):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)
        self.b.weight = self.a.weight
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.relu(self.conv(x)).mean(dim=(2, 3))
        return self.fc(F.relu(self.b(F.relu(self.a(x)))))


class Mutates(nn.Module):
    """A hostile model for the tests: adds 1 to its input in place (its batch is its own)."""

    def __init__(self, classes: int):
        super().__init__()
        self.net = BnNet(classes)

    def forward(self, x):
        x.add_(1.0)
        return self.net(x)


class AddsOne(nn.Module):
    """What Mutates computes, without touching its input."""

    def __init__(self, classes: int):
        super().__init__()
        self.net = BnNet(classes)

    def forward(self, x):
        return self.net(x + 1.0)


class IntLogits(BnNet):
    """A hostile model for the tests: BnNet's state_dict, int64 logits in evaluation."""

    def forward(self, x):
        y = self.fc(self.features(x))
        if self.training:
            return y
        return (y * 1000).long()


class NanLogits(BnNet):
    """A hostile model for the tests: BnNet's state_dict, NaN logits in evaluation."""

    def forward(self, x):
        y = self.fc(self.features(x))
        if self.training:
            return y
        return y * float("nan")


class TwoRows(BnNet):
    """A hostile model for the tests: BnNet's state_dict, the logits of the batch's first two
    images only in evaluation (right for batches of one or two)."""

    def forward(self, x):
        y = self.fc(self.features(x))
        if self.training:
            return y
        return y[:2]


class Narrow(BnNet):
    """A hostile model for the tests: BnNet's state_dict, the first 5 logits only."""

    def forward(self, x):
        return self.fc(self.features(x))[:, :5]


KINDS = {"no_params": NoParams, "tied": Tied, "mutates": Mutates, "adds_one": AddsOne, "int_logits": IntLogits,
         "nan_logits": NanLogits, "narrow": Narrow, "two_rows": TwoRows, "unused": Unused, "gn_dropout": GnDropout, "vit": TinyViT, "bn": BnNet, "digits": DigitsNet, "detached": Detached,
         "train_shape": TrainShape, "raises": Raises}


def step_seed(seed, epoch, step, rank):
    """ddp-train's step_seed (u64 wrapping arithmetic, as an i64)."""
    m = (1 << 64) - 1
    v = ((seed & m) * 1_000_003) & m
    v = (v + epoch * 1009 + rank) & m
    v = (v * 1_000_033) & m
    v = (v + step) & m
    return v - (1 << 64) if v >= 1 << 63 else v


def dropout_seed(seed, epoch, step, place):
    return step_seed(seed ^ 0x5EED_D0, epoch, step, place)


def make(kind, out, classes, seed=0):
    torch.manual_seed(seed)
    m = KINDS[kind](classes)
    torch.jit.save(torch.jit.script(m), out)


def state(model, out):
    from safetensors.torch import save_file

    m = torch.jit.load(model)
    save_file({k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}, out)


def train(model, out, seed, lr, steps, accum, batches, optimizer="sgd", label_smoothing=0.0,
          init=None, channels_last=False):
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(1)
    m = torch.jit.load(model)
    if init is not None:
        m.load_state_dict(load_file(init), strict=True)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    m.train()
    ranks = [np.load(b) for b in batches]
    world = len(ranks)
    if optimizer == "adamw":
        # ddp-train's --optimizer adamw: one group, --weight-decay on every parameter.
        opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=5e-4)
    else:
        opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    buffers = dict(m.named_buffers())
    params = list(m.parameters())
    for step in range(steps):
        grads = [torch.zeros_like(p) for p in params]
        rank0 = None
        for r, d in enumerate(ranks):
            per = len(d["labels"]) // steps
            x = torch.from_numpy(d["images"][step * per:(step + 1) * per])
            y = torch.from_numpy(d["labels"][step * per:(step + 1) * per]).long()
            for j in range(accum):
                # Micro-batch j takes positions j, j + accum, ... of the rank's batch.
                torch.manual_seed(dropout_seed(seed, 0, step, r * accum + j))
                xj = x[j::accum]
                if channels_last:
                    xj = xj.contiguous(memory_format=torch.channels_last)
                loss = F.cross_entropy(m(xj), y[j::accum],
                                       label_smoothing=label_smoothing) / accum
                for p in params:
                    p.grad = None
                loss.backward()
                for g, p in zip(grads, params):
                    g += p.grad
            if r == 0:
                # DDP broadcasts rank 0's buffers before every forward: only rank 0's count.
                rank0 = {k: v.clone() for k, v in buffers.items()}
        with torch.no_grad():
            for k, v in buffers.items():
                v.copy_(rank0[k])
        for g, p in zip(grads, params):
            p.grad = g / world
        opt.step()
    save_file({k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}, out)


def _ddp_rank(rank, world, port, jobs):
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    for job in jobs:
        _ddp_train(rank, *job)
    dist.destroy_process_group()


def _ddp_train(rank, model, out, seed, lr, steps, batches):
    from safetensors.torch import save_file

    m = torch.jit.load(model)
    m.train()
    ddp = torch.nn.parallel.DistributedDataParallel(m)  # broadcast_buffers=True, as ddp-train
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    d = np.load(batches[rank])
    per = len(d["labels"]) // steps
    for step in range(steps):
        x = torch.from_numpy(d["images"][step * per:(step + 1) * per])
        y = torch.from_numpy(d["labels"][step * per:(step + 1) * per]).long()
        torch.manual_seed(dropout_seed(seed, 0, step, rank))
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        save_file({k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}, out)


def ddp(port, jobs):
    """Each job (MODEL, OUT, SEED, LR, STEPS, BATCHES) trained by DDP in turn, in one process per
    rank (one npz each; every job with as many)."""
    import torch.multiprocessing as mp

    world = len(jobs[0][-1])
    assert all(len(j[-1]) == world for j in jobs), "every ddp job with the same number of ranks"
    mp.spawn(_ddp_rank, args=(world, port, jobs), nprocs=world)


def eager(kind, classes, checkpoint, snippet):
    from safetensors.torch import load_file

    m = KINDS[kind](classes)
    m.load_state_dict(load_file(checkpoint), strict=True)
    m.eval()
    scope = {}
    exec(open(snippet).read(), scope)
    torch.manual_seed(0)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        a, b = m(x), scope["model"](x)
    assert torch.equal(a, b), (a - b).abs().max()


def ddp_job(argv):
    """`ddp` arguments (MODEL OUT SEED LR STEPS PORT BATCHES...): (port, job)."""
    return int(argv[5]), (argv[0], argv[1], int(argv[2]), float(argv[3]), int(argv[4]), argv[6:])


def run(argv):
    cmd = argv[0]
    if cmd == "make":
        make(argv[1], argv[2], int(argv[3]), int(argv[4]) if len(argv) > 4 else 0)
    elif cmd == "train":
        opts = {}
        args = argv[1:]
        while args and args[0].startswith("--"):
            key, _, value = args.pop(0)[2:].partition("=")
            if key == "optimizer" and value in ("sgd", "adamw"):
                opts["optimizer"] = value
            elif key == "label-smoothing":
                opts["label_smoothing"] = float(value)
            elif key == "init":
                opts["init"] = value
            elif key == "channels-last" and not value:
                opts["channels_last"] = True
            else:
                sys.exit(f"train: unknown option --{key}")
        train(args[0], args[1], int(args[2]), float(args[3]), int(args[4]), int(args[5]), args[6:],
              **opts)
    elif cmd == "ddp":
        port, job = ddp_job(argv[1:])
        ddp(port, [job])
    elif cmd == "state":
        state(argv[1], argv[2])
    elif cmd == "eager":
        eager(argv[1], int(argv[2]), argv[3], argv[4])
    elif cmd == "each":
        import json

        with open(argv[1]) as f:
            calls = json.load(f)
        jobs = [ddp_job(c[1:]) for c in calls if c[0] == "ddp"]
        for c in calls:
            if c[0] == "each":
                sys.exit("each: calls cannot be `each`")
            if c[0] != "ddp":
                run(c)
        if jobs:
            ddp(jobs[0][0], [job for _, job in jobs])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    run(sys.argv[1:])
