#!/usr/bin/env python3
"""End-to-end CPU training on JPEGs: ddp-train on an image folder against the same loop in plain
PyTorch (torchvision's ImageFolder + DataLoader(num_workers=N) + RandomResizedCrop/flip/ToTensor/
Normalize, torchvision's ResNet, SGD with momentum and weight decay, cross-entropy), side by side
in one run: training images/s, with the first step (start-up, workers spawning) left out of both;
--rounds times, the two sides alternately, medians printed (a shared machine's speed drifts).
--from-memory measures the same steps without images (ddp-train's synthetic data, one random batch
in PyTorch): the model's own share, and the most a loader could bring.

  .venv/bin/python scripts/bench/image_train.py [--images 512] [--batch 32] [--size 112]
      [--steps 12] [--model resnet18] [--rounds 3] [--from-memory]
      [--cache ~/.cache/shardkit-bench/wallpapers]

The images are image_loader.py's set (500x375 crops of real photos, 10 classes). Both sides use
every core: ddp-train's decoding threads (--workers, default the cores) beside libtorch's
threads, PyTorch's DataLoader worker processes (the cores) beside its own.
"""
import json, os, subprocess, sys, time
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crop_resize_photos import fetch  # noqa: E402
from image_loader import BIN, make_set  # noqa: E402
from benchlib import flags  # noqa: E402


def ours(root, a):
    """Images/s of ddp-train's training steps after the first (two runs: steps-1 and steps)."""
    data = f"synthetic:{a.images}:{a.size}" if a.from_memory else f"imagefolder:{root}"
    size = [] if a.from_memory else ["--image-size", str(a.size)]  # synthetic data is sized already

    def run(steps):
        out = subprocess.run(
            [f"{BIN}/ddp-train", "--device", "cpu", "--data", data, "--model", a.model,
             *size, "--batch-size", str(a.batch), "--epochs", "1",
             "--max-steps", str(steps), "--lr", "0.01", "-q"],
            capture_output=True, text=True, check=True)
        rec = [json.loads(l) for l in out.stdout.splitlines() if '"type":"epoch"' in l][-1]
        return rec["steps"] * rec["step_ms"] / 1000.0
    t1, tn = run(1), run(a.steps)
    return (a.steps - 1) * a.batch / (tn - t1)


def pytorch(root, a):
    import torch
    import torch.nn.functional as F
    import torchvision
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    if a.from_memory:
        # ddp-train's synthetic data has 100 classes.
        batch = (torch.randn(a.batch, 3, a.size, a.size), torch.randint(0, 100, (a.batch,)))
        classes, it = 100, iter([batch] * a.steps)
    else:
        ds = ImageFolder(os.path.join(root, "train"), transform=tf)
        dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                         num_workers=os.cpu_count())
        classes, it = len(ds.classes), iter(dl)
    model = getattr(torchvision.models, a.model)(num_classes=classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    model.train()
    t = None
    for step in range(a.steps):
        x, y = next(it)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 0:
            t = time.perf_counter()
    return (a.steps - 1) * a.batch / (time.perf_counter() - t)


def main():
    a = flags(
        images=512, batch=32, size=112, steps=12, model="resnet18",
        cache=os.path.expanduser("~/.cache/shardkit-bench/wallpapers"), workdir="/tmp/shardkit-bench-loader",
        rounds=(3, "measure both sides this many times, alternately; medians are printed"),
        from_memory=(False, "the same steps on data held in memory, without images or a loader"),
    ).parse_args()
    assert a.steps * a.batch <= a.images, "one epoch holds the steps"
    photos = [p for f in ("JPEG", "PNG", "WEBP") for p, _ in fetch(a.cache)[f]]
    make_set(photos, a.workdir, a.images)
    runs = [(ours(a.workdir, a), pytorch(a.workdir, a)) for _ in range(a.rounds)]
    o, p = median([r[0] for r in runs]), median([r[1] for r in runs])
    ratios = sorted(r[0] / r[1] for r in runs)
    source = "from memory" if a.from_memory else "from JPEGs"
    print(f"{a.model} {a.size}x{a.size} batch {a.batch} {source}, {os.cpu_count()} cores, medians of {a.rounds} rounds: "
          f"ddp-train {o:.1f} img/s, PyTorch {p:.1f} img/s, ratio {median(ratios):.2f} "
          f"(rounds {ratios[0]:.2f}-{ratios[-1]:.2f})")
    print(json.dumps({"bench": "image-train", "from_memory": a.from_memory, "model": a.model, "size": a.size, "batch": a.batch,
                      "cores": os.cpu_count(), "ours_img_s": o, "pytorch_img_s": p, "ratio": median(ratios),
                      "ratios": ratios}))


if __name__ == "__main__":
    main()
