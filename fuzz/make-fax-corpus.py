#!/usr/bin/env python3
"""Fax-coded TIFFs with damaged data, for scripts/pillow-conformance.py: three bilevel drawings
saved by Pillow as Group 4, Group 3 and CCITT RLE, then 170 copies of each with 1 to 3 random bits
flipped after the header (1,530 files; seeded, so the same files each run).

    .venv/bin/python fuzz/make-fax-corpus.py OUT_DIR && .venv/bin/python scripts/pillow-conformance.py OUT_DIR
"""
import io, os, random, sys
from PIL import Image, ImageDraw
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
rng = random.Random(4)
bases = []
for k, (w, h) in enumerate([(64, 48), (100, 37), (33, 80)]):
    im = Image.new("L", (w, h), 255)
    d = ImageDraw.Draw(im)
    for i in range(12):
        x0, y0 = rng.randrange(w // 2), rng.randrange(h // 2)
        d.ellipse([x0, y0, x0 + rng.randrange(w // 2), y0 + rng.randrange(h // 2)], outline=0)
        d.line([rng.randrange(w), rng.randrange(h), rng.randrange(w), rng.randrange(h)], fill=0, width=2)
    for comp in ("group4", "group3", "tiff_ccitt"):
        b = io.BytesIO(); im.convert("1").save(b, "TIFF", compression=comp); bases.append((f"{k}-{comp}", b.getvalue()))
n = 0
for name, data in bases:
    for i in range(170):
        m = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            j = rng.randrange(8, len(m))
            m[j] ^= 1 << rng.randrange(8)
        open(os.path.join(out, f"{name}-{i:03d}.tif"), "wb").write(bytes(m)); n += 1
print(n)
