#!/usr/bin/env python3
"""Makes crop-resize's reference images with Pillow (the seed-000 pipeline).

Writes tests/fixtures/pillow/inputs/* (small images in every mode crop-resize must handle) and
tests/fixtures/pillow/expected/*:
  <name>.decoded.png      Image.open(p).convert('RGB')                     (decode only)
  <name>.<R>.png          ... .crop(centre square).resize((R, R), LANCZOS)  (the whole pipeline)
  <name>.exif.<R>.png     the same after ImageOps.exif_transpose            (--exif-transpose)
and manifest.json (Pillow and libjpeg-turbo versions, sizes). Run with the project venv's Python
(Pillow pinned in scripts/setup):  .venv/bin/python scripts/make-pillow-reference.py
"""
import project_python  # first: the project's venv (scripts/setup), or what to run

project_python.use('numpy', 'PIL')

import io, json, os, struct, sys, zlib

import numpy as np
import PIL
from PIL import Image, ImageOps, features

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "pillow")
SIZES = [24, 96]  # down-scale and up-scale for every input (inputs are 40-120 px)


def texture(h, w, c, seed):
    """Smooth colour fields plus edges and noise: something JPEG and Lanczos both notice."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((h, w, c))
    for k in range(c):
        fx, fy, ph = rng.uniform(0.02, 0.3, 3)
        out[..., k] = 128 + 90 * np.sin(fx * x + ph * 7) * np.cos(fy * y) + rng.normal(0, 12, (h, w))
    out[(x // 9 + y // 7) % 5 == 0] = 250
    return np.clip(out, 0, 255).astype(np.uint8)


def png16(arr, path, color_type):
    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[r].astype(">u2").tobytes() for r in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def exif_with_orientation(o):
    exif = Image.Exif()
    exif[0x0112] = o
    return exif.tobytes()


def make_inputs(d):
    rgb = lambda h, w, s: Image.fromarray(texture(h, w, 3, s), "RGB")
    rgb(71, 97, 1).save(f"{d}/photo420.jpg", quality=90)  # 4:2:0 (Pillow's default)
    rgb(80, 64, 2).save(f"{d}/photo444.jpg", quality=95, subsampling=0)
    rgb(45, 120, 3).save(f"{d}/progressive.jpg", quality=85, progressive=True)
    Image.fromarray(texture(40, 50, 1, 4)[..., 0], "L").save(f"{d}/gray.jpg", quality=90)
    Image.fromarray(texture(33, 40, 4, 5), "CMYK").save(f"{d}/cmyk.jpg", quality=92)
    rgb(52, 68, 6).save(f"{d}/exif6.jpg", quality=90, exif=exif_with_orientation(6))
    rgb(45, 61, 7).save(f"{d}/rgb.png")
    Image.fromarray(texture(58, 41, 4, 8), "RGBA").save(f"{d}/rgba.png")
    pal = rgb(50, 50, 9).quantize(colors=37)
    pal.info["transparency"] = 3
    pal.save(f"{d}/palette.png", transparency=3)
    Image.fromarray(texture(44, 60, 1, 10)[..., 0], "L").save(f"{d}/gray.png")
    Image.fromarray(texture(44, 60, 2, 11), "LA").save(f"{d}/la.png")
    Image.fromarray(texture(40, 40, 1, 12)[..., 0] > 128).save(f"{d}/bilevel.png")
    g = texture(30, 47, 1, 13)[..., 0].astype(np.uint16)
    png16(g * 3, f"{d}/gray16.png", 0)  # values up to 765: Pillow clips these to 255
    png16(texture(37, 53, 3, 14).astype(np.uint16) * 257 + 11, f"{d}/rgb16.png", 2)
    png16(texture(37, 53, 4, 15).astype(np.uint16) * 251, f"{d}/rgba16.png", 6)


def pipeline(im, r):
    w, h = im.size
    s = min(w, h)
    return im.crop(((w - s) // 2, (h - s) // 2, (w + s) // 2, (h + s) // 2)).resize((r, r), Image.LANCZOS)


def main():
    inputs, expected = f"{ROOT}/inputs", f"{ROOT}/expected"
    os.makedirs(inputs, exist_ok=True)
    os.makedirs(expected, exist_ok=True)
    make_inputs(inputs)
    manifest = {"pillow": PIL.__version__, "libjpeg_turbo": features.version("libjpeg_turbo"),
                "sizes": SIZES, "inputs": {}}
    for name in sorted(os.listdir(inputs)):
        im = Image.open(f"{inputs}/{name}")
        mode = im.mode
        rgb = im.convert("RGB")
        rgb.save(f"{expected}/{name}.decoded.png")
        for r in SIZES:
            pipeline(rgb, r).save(f"{expected}/{name}.{r}.png")
        if name.startswith("exif"):
            t = ImageOps.exif_transpose(Image.open(f"{inputs}/{name}")).convert("RGB")
            for r in SIZES:
                pipeline(t, r).save(f"{expected}/{name}.exif.{r}.png")
        manifest["inputs"][name] = {"mode": mode, "size": list(im.size)}
    with open(f"{ROOT}/manifest.json", "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(f"wrote {len(manifest['inputs'])} inputs under {ROOT}", file=sys.stderr)


if __name__ == "__main__":
    main()
