#!/usr/bin/env python3
"""ddp-train's image loader vs torchvision's ImageFolder + DataLoader, the same transforms on the
same ImageNet-like JPEGs, side by side in one run: images/s with 1 worker (per core) and with all
cores, for the training transform (RandomResizedCrop(224) + flip + ToTensor + Normalize) and the
evaluation one (Resize(256) + CenterCrop(224) + ToTensor + Normalize, which must agree bit for
bit: max |delta| printed). Each case is measured --rounds times, the two sides alternately: the
medians of images/s and of the rounds' ratios are printed, with the ratios' range (a shared
machine's speed drifts from run to run).

  .venv/bin/python scripts/bench/image_loader.py [--images 512] [--batch 64] [--rounds 3]
      [--cache ~/.cache/shardkit-bench/wallpapers] [--workdir /tmp/shardkit-bench-loader]

The JPEGs are 500x375 (and 375x500) crops of real photos from Debian's wallpaper packages
(fetched with apt-get download the first time, see crop_resize_photos.py), saved at quality 90 in
10 class folders, as ImageNet's are. Our side runs `ddp-train --dump-batches` (decoding timed by
the tool itself, without the .npz it then writes); torchvision's iterates a DataLoader of
num_workers processes over the same number of batches.
"""
import os, re, subprocess, sys, time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crop_resize_photos import fetch  # noqa: E402
from benchlib import flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))


def make_set(photos, root, n, seed=0):
    """n JPEGs of 500x375 or 375x500 cut from the photos, in 10 classes, under root/train and
    root/val (the same files: the loader is measured, not the model)."""
    done = os.path.join(root, f".done-{n}")
    if os.path.exists(done):
        return
    rng = np.random.RandomState(seed)
    for i in range(n):
        src = photos[i % len(photos)]
        with Image.open(src) as im:
            im = im.convert("RGB")
            w, h = (500, 375) if i % 4 else (375, 500)
            scale = max(w / im.width, h / im.height) * (1.0 + rng.rand())
            im = im.resize((max(w, int(im.width * scale)), max(h, int(im.height * scale))), Image.BILINEAR)
            x, y = rng.randint(0, im.width - w + 1), rng.randint(0, im.height - h + 1)
            crop = im.crop((x, y, x + w, y + h))
        for split in ("train", "val"):
            d = os.path.join(root, split, f"c{i % 10}")
            os.makedirs(d, exist_ok=True)
            crop.save(os.path.join(d, f"{i:05d}.JPEG"), quality=90)
    open(done, "w").close()


def ours(root, split, batches, batch, workers):
    out = subprocess.run(
        [f"{BIN}/ddp-train", "--device", "cpu", "--data", f"imagefolder:{root}", "--batch-size", str(batch),
         "--workers", str(workers), "--prefetch", "0", "--dump-batches", str(batches),
         "--dump", f"{root}/dump.npz", "--split", split],
        capture_output=True, text=True, check=True)
    m = re.search(r"decoded in ([\d.]+) s", out.stderr)
    assert m, out.stderr
    n = batches * batch
    return n / float(m[1]), f"{root}/dump.npz"


def torchvision_loader(root, split, batches, batch, workers):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    tf = (T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm]) if split == "train"
          else T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm]))
    ds = ImageFolder(os.path.join(root, split), transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=split == "train", num_workers=workers,
                                     persistent_workers=False)
    it = iter(dl)
    next(it)  # the workers are up: start the clock after the first batch
    t = time.perf_counter()
    for _ in range(batches - 1):
        next(it)
    return (batches - 1) * batch / (time.perf_counter() - t)


def max_diff(root, dump):
    """Our evaluation batches against torchvision's on the same samples."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    d = np.load(dump)
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = ImageFolder(os.path.join(root, "val"), transform=tf)
    ref = np.stack([ds[i][0].numpy() for i in d["indices"]])
    return float(np.abs(ref - d["images"]).max())


def main():
    a = flags(
        images=512, batch=64,
        cache=os.path.expanduser("~/.cache/shardkit-bench/wallpapers"), workdir="/tmp/shardkit-bench-loader",
        rounds=(3, "measure both sides this many times, alternately; medians are printed (a shared "
                   "machine's speed drifts between runs)"),
    ).parse_args()
    photos = [p for f in ("JPEG", "PNG", "WEBP") for p, _ in fetch(a.cache)[f]]
    make_set(photos, a.workdir, a.images)
    cores = os.cpu_count()
    batches = a.images // a.batch
    rows = []
    for split in ("train", "val"):
        for workers in sorted({1, cores}):
            runs = []
            for _ in range(a.rounds):
                o, dump = ours(a.workdir, split, batches, a.batch, workers)
                runs.append((o, torchvision_loader(a.workdir, split, batches, a.batch, workers)))
            diff = max_diff(a.workdir, dump) if split == "val" else None
            o, t = (float(np.median([r[i] for r in runs])) for i in (0, 1))
            ratios = sorted(r[0] / r[1] for r in runs)
            rows.append({"transform": split, "workers": workers, "ours_img_s": o, "torchvision_img_s": t,
                         "ratio": float(np.median(ratios)), "ratios": ratios, "max_abs_diff": diff})
    print(f"{'transform':<9} {'workers':>7} {'ours img/s':>10} {'torchvision':>11} {'ratio':>6} {'min-max':>9} {'max|d|':>7}")
    for r in rows:
        d = "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1g}"
        spread = f"{r['ratios'][0]:.2f}-{r['ratios'][-1]:.2f}"
        print(f"{r['transform']:<9} {r['workers']:>7} {r['ours_img_s']:>10.1f} {r['torchvision_img_s']:>11.1f} "
              f"{r['ratio']:>6.2f} {spread:>9} {d:>7}")
    import json
    print(json.dumps({"bench": "image-loader", "cores": cores, "images": a.images, "rows": rows}))


if __name__ == "__main__":
    main()
