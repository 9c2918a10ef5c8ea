#!/usr/bin/env python3
"""Seeds for the decode_crop_resize fuzz target: small real files of every mode and compression
Pillow writes (PNG, JPEG, GIF, BMP, TIFF and BigTIFF, WebP, animations), a hand-built tiled TIFF with separate colour
planes (PlanarConfiguration=2, which made the tiff crate assert: issue 18, item 1), and damaged
variants of each (truncated, bytes flipped in the header). libFuzzer mutates from real structure
this way, where random bytes rarely get past a format's magic.

    make-decode-corpus.py OUT_DIR     (prints how many files it wrote)
"""
import io
import os
import random
import struct
import sys

import numpy as np
from PIL import Image

W, H = 23, 17  # odd sizes: partial MCUs, tiles and rows


def base():
    rng = np.random.default_rng(18)
    y, x = np.mgrid[0:H, 0:W]
    rgb = np.stack([x * 11 % 256, y * 15 % 256, (x * y) % 256], -1).astype(np.uint8)
    rgb ^= rng.integers(0, 24, rgb.shape, dtype=np.uint8)
    return Image.fromarray(rgb, "RGB")


def modes(img):
    """Every mode Pillow can convert an RGB image to, named as Pillow names them."""
    out = {}
    for m in ["1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "I", "F", "I;16", "La", "RGBa"]:
        try:
            out[m] = img.convert(m) if m not in ("I;16",) else img.convert("I").point(lambda v: v * 200).convert("I;16")
        except (ValueError, OSError):
            pass
    return out


def variants():
    """(name, save(img) -> bytes) for each format option worth a seed."""
    v = []

    def saver(fmt, **kw):
        def save(im):
            b = io.BytesIO()
            im.save(b, fmt, **kw)
            return b.getvalue()
        return save

    v += [("png", saver("PNG")), ("png-interlaced", saver("PNG", interlace=1)),
          ("png-bits2", saver("PNG", bits=2)), ("png-trns", saver("PNG", transparency=0))]
    for q, sub, prog in [(5, 2, False), (95, 0, False), (75, 1, True), (50, 2, True)]:
        v.append((f"jpeg-q{q}-s{sub}{'-prog' if prog else ''}", saver("JPEG", quality=q, subsampling=sub, progressive=prog)))
    exif = Image.Exif()
    exif[0x0112] = 6
    v.append(("jpeg-exif6", saver("JPEG", exif=exif.tobytes())))
    v += [("gif", saver("GIF")), ("gif-interlaced", saver("GIF", interlace=True)), ("bmp", saver("BMP"))]
    for c in [None, "tiff_lzw", "tiff_deflate", "tiff_adobe_deflate", "packbits", "jpeg", "group4", "tiff_ccitt",
              "group3", "lzma", "zstd", "webp"]:
        v.append((f"tiff-{c or 'raw'}", saver("TIFF", compression=c)))
    v.append(("bigtiff", saver("TIFF", big_tiff=True)))
    v += [("webp-lossy", saver("WEBP", quality=30)), ("webp-lossless", saver("WEBP", lossless=True))]
    return v


def animated(img):
    frames = [img, img.transpose(Image.Transpose.FLIP_LEFT_RIGHT), img.rotate(90, expand=False)]
    out = {}
    for fmt, kw in [("GIF", {"loop": 0, "duration": 40, "disposal": 2}), ("WEBP", {"loop": 0, "duration": 40}),
                    ("TIFF", {}), ("PNG", {"duration": 40})]:
        b = io.BytesIO()
        try:
            frames[0].save(b, fmt, save_all=True, append_images=frames[1:], **kw)
            out[f"animated.{fmt.lower()}"] = b.getvalue()
        except (ValueError, OSError):
            pass
    return out


def planar_tiled_tiff(w, h, tile):
    """RGB, 8 bits, tiles of tile x tile, one plane per colour (PlanarConfiguration=2), tiles
    overhanging the image: the layout the tiff crate asserted on."""
    tx, ty = -(-w // tile), -(-h // tile)
    tiles = tx * ty * 3
    n = 11
    bps_at = 8 + 2 + 12 * n + 4
    offsets_at = bps_at + 6
    counts_at = offsets_at + 4 * tiles
    data_at = counts_at + 4 * tiles
    tile_bytes = tile * tile
    b = bytearray(b"II" + struct.pack("<HI", 42, 8) + struct.pack("<H", n))
    for tag, typ, count, value in [(256, 3, 1, w), (257, 3, 1, h), (258, 3, 3, bps_at), (259, 3, 1, 1), (262, 3, 1, 2),
                                   (277, 3, 1, 3), (284, 3, 1, 2), (322, 3, 1, tile), (323, 3, 1, tile),
                                   (324, 4, tiles, offsets_at), (325, 4, tiles, counts_at)]:
        b += struct.pack("<HHII", tag, typ, count, value)
    b += struct.pack("<I", 0) + struct.pack("<3H", 8, 8, 8)
    b += b"".join(struct.pack("<I", data_at + i * tile_bytes) for i in range(tiles))
    b += struct.pack(f"<{tiles}I", *[tile_bytes] * tiles)
    b += bytes(i * 7 % 256 for i in range(tiles * tile_bytes))
    return bytes(b)


def damaged(name, data, rng):
    """Truncated at half and near the end; three bytes flipped within the first 64 (headers)."""
    out = {f"{name}.trunc50": data[: len(data) // 2], f"{name}.trunc90": data[: len(data) * 9 // 10]}
    flipped = bytearray(data)
    for _ in range(3):
        i = rng.randrange(min(64, len(flipped)))
        flipped[i] ^= 1 << rng.randrange(8)
    out[f"{name}.flip"] = bytes(flipped)
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    img = base()
    files = {}
    for mode, im in modes(img).items():
        for vname, save in variants():
            try:
                data = save(im)
            except (ValueError, OSError, KeyError, TypeError):
                continue  # this format cannot hold this mode (or option)
            files[f"{mode.replace(';', '_')}.{vname}"] = data
    files.update(animated(img))
    files["planar-tiled.tif"] = planar_tiled_tiff(20, 20, 16)
    files["planar-tiled-exact.tif"] = planar_tiled_tiff(32, 16, 16)
    rng = random.Random(18)
    for name, data in list(files.items()):
        files.update(damaged(name, data, rng))
    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print(len(files))


if __name__ == "__main__":
    main()
