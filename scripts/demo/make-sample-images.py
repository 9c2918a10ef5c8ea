#!/usr/bin/env python3
"""Writes a folder of sub-folders of sample photos (JPEG and PNG, assorted sizes and modes), the
layout seed 000 walks: ROOT/<person>/<n>.jpg. Deterministic. Usage: make-sample-images.py ROOT [N_DIRS] [PER_DIR]"""
import os, sys

import numpy as np
from PIL import Image

root = sys.argv[1]
n_dirs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
per_dir = int(sys.argv[3]) if len(sys.argv) > 3 else 6
rng = np.random.RandomState(2024)
for d in range(n_dirs):
    os.makedirs(f"{root}/person{d:02d}", exist_ok=True)
    for i in range(per_dir):
        w, h = int(rng.randint(180, 900)), int(rng.randint(180, 900))
        y, x = np.mgrid[0:h, 0:w] / max(w, h)
        cx, cy, r = rng.uniform(0.3, 0.7, 3)
        face = ((x - cx) ** 2 + (y - cy) ** 2 < (0.25 * r) ** 2)[..., None]
        bg = np.stack([np.sin(x * rng.uniform(2, 9) + c) * 60 + 120 for c in range(3)], -1)
        img = np.where(face, rng.uniform(120, 230, 3), bg) + rng.normal(0, 6, (h, w, 3))
        im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
        if i % 3 == 2:
            im.save(f"{root}/person{d:02d}/{i}.png")
        else:
            im.save(f"{root}/person{d:02d}/{i}.jpg", quality=int(rng.randint(70, 96)))
print(f"{n_dirs * per_dir} images under {root}", file=sys.stderr)
