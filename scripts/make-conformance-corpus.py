#!/usr/bin/env python3
"""The decode conformance corpus (issue 19): small files of every mode x compression x layout
Pillow can write, hand-made damaged and unusual variants, and Pillow 13's decoding of each as the
reference that shared/imaging/tests/conformance.rs checks bit for bit.

    .venv/bin/python scripts/make-conformance-corpus.py [OUT_DIR]   (default tests/fixtures/conformance)

Writes OUT_DIR/files/<name>, OUT_DIR/expected.json and OUT_DIR/expected.rgb. For each file,
expected.json holds what `Image.open(p).convert('RGB')` gave: {"mode", "width", "height",
"offset"} (the RGB bytes are expected.rgb[offset : offset + 3*width*height]) or {"refused": the
exception}. Deterministic: the same Pillow gives the same bytes. Needs Pillow 13.0.0 (the version
the tool promises to match) and Debian's tiffcp (libtiff-tools) for some TIFF layouts.
"""
import importlib.util
import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import warnings
import zlib

import numpy as np
import PIL
from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
_spec = importlib.util.spec_from_file_location("decode_corpus", os.path.join(ROOT, "fuzz/make-decode-corpus.py"))
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def segments(jpeg):
    """(offset, marker, length incl. marker) of each marker segment before the first SOS."""
    out, i = [], 2
    while i < len(jpeg):
        marker = jpeg[i + 1]
        n = struct.unpack(">H", jpeg[i + 2:i + 4])[0]
        out.append((i, marker, n + 2))
        if marker == 0xDA:
            break
        i += n + 2
    return out


def at_marker(jpeg, marker):
    return next(off for off, m, _ in segments(jpeg) if m == marker)


def jpeg_cases(img):
    """What real photo sets hold: warnings libjpeg decodes through, and damage Pillow refuses."""
    base = save(img, "JPEG", quality=90)
    prog = save(img, "JPEG", quality=90, progressive=True)
    rst = save(img, "JPEG", quality=90, restart_marker_blocks=1)
    sos = at_marker(base, 0xDA)
    scan = sos + segments(base)[-1][2]  # first byte of entropy-coded data
    out = {}
    dqt = at_marker(base, 0xDB)
    out["jpeg-extraneous-before-dqt"] = base[:dqt] + b"\x12\x34\x56" + base[dqt:]
    out["jpeg-extraneous-before-sos"] = base[:sos] + b"\x00\x01" + base[sos:]
    out["jpeg-junk-after-soi"] = base[:2] + b"junk!" + base[2:]
    out["jpeg-fill-bytes"] = base[:dqt] + b"\xff\xff\xff" + base[dqt:]
    icc = b"ICC_PROFILE\x00\x03\x02" + bytes(range(40))
    out["jpeg-bad-icc"] = base[:2] + b"\xff\xe2" + struct.pack(">H", len(icc) + 2) + icc + base[2:]
    app = b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00"
    out["jpeg-app1-short-length"] = base[:2] + b"\xff\xe1" + struct.pack(">H", len(app) - 4) + app + base[2:]
    out["jpeg-app1-long-length"] = base[:2] + b"\xff\xe1" + struct.pack(">H", len(app) + 8) + app + base[2:]
    out["jpeg-jfif-short"] = base[:2] + b"\xff\xe0\x00\x07JFIF\x00" + base[2:]
    out["jpeg-adobe-short"] = base[:2] + b"\xff\xee\x00\x08Adobe\x00" + base[2:]
    out["jpeg-no-eoi"] = base[:-2]
    out["jpeg-trailing-junk"] = base + b"\x00garbage after EOI" * 3
    out["jpeg-cut-in-scan"] = base[: (scan + len(base)) // 2]
    out["jpeg-cut-last-bytes"] = base[:-12]
    corrupt = bytearray(base)
    for k in range(6):
        i = scan + 40 + 29 * k
        if corrupt[i] != 0xFF and corrupt[i - 1] != 0xFF:
            corrupt[i] = (corrupt[i] ^ 0x5A) or 1
            if corrupt[i] == 0xFF:
                corrupt[i] = 0xFE
    out["jpeg-corrupt-scan"] = bytes(corrupt)
    out["jpeg-progressive-no-eoi"] = prog[:-2]
    out["jpeg-progressive-cut"] = prog[: len(prog) * 3 // 4]
    i = rst.find(b"\xff\xd1", at_marker(rst, 0xDA))
    out["jpeg-restart-damaged"] = rst[:i] + b"\xff\xd5" + rst[i + 2:] if i > 0 else rst
    out["jpeg-restart-missing"] = rst[:i] + rst[i + 2:] if i > 0 else rst
    out["jpeg-no-marker"] = base[:dqt] + b"\xff\x02" + base[dqt:]
    out["jpeg-two-sof"] = base[:sos] + base[at_marker(base, 0xC0):sos] + base[sos:]
    grey = save(img.convert("L"), "JPEG", quality=80)
    out["jpeg-grey-no-eoi"] = grey[:-2]
    cmyk = save(img.convert("CMYK"), "JPEG", quality=80)
    out["jpeg-cmyk-extraneous"] = cmyk[:at_marker(cmyk, 0xDB)] + b"\x07" + cmyk[at_marker(cmyk, 0xDB):]
    return out


def lzw_min(indices, bits):
    """GIF LZW with a clear code before every code: valid, uncompressed-size data."""
    clear, end = 1 << bits, (1 << bits) + 1
    width = bits + 1
    acc, nacc, out = 0, 0, bytearray()
    codes = []
    for v in indices:
        codes += [clear, v]
    codes.append(end)
    for c in codes:
        acc |= c << nacc
        nacc += width
        while nacc >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nacc -= 8
    if nacc:
        out.append(acc)
    blocks = bytearray([bits])
    for i in range(0, len(out), 255):
        chunk = out[i:i + 255]
        blocks += bytes([len(chunk)]) + chunk
    return bytes(blocks + b"\x00")


def gif_cases(img):
    p = img.quantize(16)
    out = {}
    out["gif-transparency"] = save(p, "GIF", transparency=3)
    out["gif-transparency-0"] = save(p, "GIF", transparency=0)
    frames = [p, p.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    out["gif-disposal2-transparency"] = save(frames[0], "GIF", save_all=True, append_images=frames[1:], disposal=2,
                                             transparency=5, duration=40)
    out["gif-bg-index"] = save(p, "GIF", background=7)
    w, h = 5, 4
    idx = [(x + y) % 4 for y in range(h) for x in range(w)]
    desc = b"," + struct.pack("<HHHHB", 0, 0, w, h, 0)
    out["gif-no-colour-table"] = b"GIF89a" + struct.pack("<HHBBB", w, h, 0, 0, 0) + desc + lzw_min(idx, 2) + b";"
    gct = bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])  # 3 colours padded to 4 below
    out["gif-local-table-only"] = (b"GIF89a" + struct.pack("<HHBBB", w, h, 0, 0, 0) + b","
                                   + struct.pack("<HHHHB", 0, 0, w, h, 0x81) + gct + b"\xff\xff\xff"
                                   + lzw_min(idx, 2) + b";")
    gce = b"!\xf9\x04\x01\x00\x00\x02\x00"  # transparency index 2
    out["gif-no-colour-table-transparency"] = (b"GIF89a" + struct.pack("<HHBBB", w, h, 0, 0, 0) + gce + desc
                                               + lzw_min(idx, 2) + b";")
    small = b"," + struct.pack("<HHHHB", 1, 1, 3, 2, 0)
    out["gif-frame-smaller-than-screen"] = (b"GIF89a" + struct.pack("<HHBBB", w, h, 0x81, 1, 0) + gct + b"\xff\xff\xff"
                                            + small + lzw_min([1, 2, 3, 0, 1, 2], 2) + b";")
    rng = np.random.default_rng(19)
    noise = Image.fromarray(rng.integers(0, 256, (96, 128), dtype=np.uint8), "L").convert("P")
    out["gif-noise-256-colours"] = save(noise, "GIF")  # code sizes up to 12 bits, table resets
    out["gif-noise-interlaced"] = save(noise.crop((0, 0, 37, 11)), "GIF", interlace=True)
    out["gif-ends-early"] = (b"GIF89a" + struct.pack("<HHBBB", w, h, 0x81, 1, 0) + gct + b"\xff\xff\xff" + desc
                             + lzw_min(idx[:-3], 2) + b";")
    return out


def bmp_file(info, pixels, palette=b"", top_down=False):
    header_size = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", header_size + len(pixels), 0, 0, header_size) + info + palette + pixels


def bmp_info(w, h, bpp, compression, size_image=0, colours=0, planes=1, header=40):
    info = struct.pack("<IiiHHIIiiII", header, w, h, planes, bpp, compression, size_image, 2835, 2835, colours, 0)
    return info + bytes(header - 40)


def bmp_cases(img):
    out = {}
    w, h = 7, 5
    pal8 = b"".join(bytes([(i * 37) % 256, (i * 91) % 256, (i * 13) % 256, 0]) for i in range(16))
    # RLE8: runs, an absolute run, end-of-line before the row is full, a delta, end of bitmap early.
    rle8 = (b"\x03\x01\x02\x02\x00\x02" b"\x00\x03\x05\x06\x07\x00"  # row 0: 3x1, 2x2, abs 5 6 7 (padded)
            b"\x00\x00"  # end of row 0
            b"\x02\x04\x00\x00"  # row 1: 2x4 then EOL (rest skipped)
            b"\x00\x02\x02\x01"  # delta: 2 right, 1 up (row 2 skipped)
            b"\x04\x09\x00\x01")  # 4x9 then end of bitmap (rows 3-4 partly skipped)
    out["bmp-rle8-skips"] = bmp_file(bmp_info(w, h, 8, 1, len(rle8), 16), rle8, pal8)
    rle4 = (b"\x05\x12\x00\x00" b"\x00\x03\x34\x50\x00\x00" b"\x00\x02\x01\x01" b"\x03\x67\x00\x01")
    out["bmp-rle4-skips"] = bmp_file(bmp_info(w, h, 4, 2, len(rle4), 16), rle4, pal8)
    out["bmp-rle8-top-down"] = bmp_file(bmp_info(w, -h, 8, 1, len(rle8), 16), rle8, pal8)
    rows = b"".join(bytes((x * 3 + y) % 16 for x in range(w)) + b"\x00" for y in range(h))
    out["bmp-8bit-planes-2"] = bmp_file(bmp_info(w, h, 8, 0, 0, 16, planes=2), rows, pal8)
    out["bmp-os2-v2-header"] = bmp_file(bmp_info(w, h, 8, 0, 0, 16, header=64), rows, pal8)
    px = np.asarray(img)[:h, :w].astype(np.uint16)
    for name, (rm, gm, bm) in {"565": (0xF800, 0x07E0, 0x001F), "555": (0x7C00, 0x03E0, 0x001F)}.items():
        rs, gs = (11, 5) if name == "565" else (10, 5)
        gb = 6 if name == "565" else 5
        v = ((px[..., 0] >> 3) << rs) | ((px[..., 1] >> (8 - gb)) << gs) | (px[..., 2] >> 3)
        data = b"".join(v[y].astype("<u2").tobytes() + b"\x00\x00" for y in range(h - 1, -1, -1))
        if name == "555":
            out["bmp-16bit-555"] = bmp_file(bmp_info(w, h, 16, 0, len(data)), data)
        masks = struct.pack("<III", rm, gm, bm)
        out[f"bmp-16bit-{name}-bitfields"] = bmp_file(bmp_info(w, h, 16, 3, len(data)), data, masks)
    rgb = np.asarray(img)[:h, :w]
    bgrx = b"".join(np.concatenate([rgb[y, :, ::-1], np.full((w, 1), 9, np.uint8)], 1).tobytes()
                    for y in range(h - 1, -1, -1))
    for name, masks in {"xbgr": (0xFF000000, 0xFF0000, 0xFF00, 0), "abgr": (0xFF000000, 0xFF0000, 0xFF00, 0xFF),
                        "rgba": (0xFF, 0xFF00, 0xFF0000, 0xFF000000), "odd": (0xFF00, 0xFF, 0xFF0000, 0)}.items():
        info = bmp_info(w, h, 32, 3, len(bgrx), header=56) [:40] + struct.pack("<IIII", *masks)
        out[f"bmp-32bit-bitfields-{name}"] = bmp_file(info, bgrx)
    os2 = struct.pack("<IHHHH", 12, w, h, 1, 8)
    pal3 = b"".join(bytes([(i * 37) % 256, (i * 91) % 256, (i * 13) % 256]) for i in range(256))
    out["bmp-os2-v1-header"] = bmp_file(os2, rows, pal3)
    ramp2 = b"\x00\x00\x00\x00\xff\xff\xff\x00"
    bits = b"".join(bytes((x + y) % 2 for x in range(w)) + b"\x00" for y in range(h))
    out["bmp-8bit-two-grey-colours"] = bmp_file(bmp_info(w, h, 8, 0, 0, 2), bits, ramp2)
    ramp16 = b"".join(bytes([i, i, i, 0]) for i in range(16))
    nib = b"".join(bytes(((x * 2 + y) % 16) << 4 | (x * 2 + 1 + y) % 16 for x in range(4)) for y in range(h))
    out["bmp-4bit-grey-ramp"] = bmp_file(bmp_info(w, h, 4, 0, 0, 16), nib, ramp16)
    rows24 = b"".join(rgb[y, :, ::-1].tobytes() + b"\x00" * ((4 - 3 * w % 4) % 4) for y in range(h))
    out["bmp-24bit-top-down"] = bmp_file(bmp_info(w, -h, 24, 0), rows24)
    out["bmp-24bit-last-row-unpadded"] = bmp_file(bmp_info(w, h, 24, 0), rows24[: len(rows24) - 3])
    out["bmp-24bit-cut"] = bmp_file(bmp_info(w, h, 24, 0), rows24[: len(rows24) - 12])
    return out


def png_cases(img):
    out = {}
    g16 = np.asarray(img.convert("L"), dtype=np.uint16) * 257
    raw = b"".join(b"\x00" + g16[y].astype(">u2").tobytes() for y in range(g16.shape[0]))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    ihdr = struct.pack(">IIBBBBB", g16.shape[1], g16.shape[0], 16, 0, 0, 0, 0)
    for name, trns in [("png-grey16-trns", int(g16[0, 0])), ("png-grey16-trns-absent-value", 1234)]:
        out[name] = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"tRNS", struct.pack(">H", trns))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return out


def tiff_file(w, h, tags, blocks, big=False, tiled=False):
    """A TIFF of one directory: header, the strips (or tiles) as given, then the IFD. `tags` maps
    tag -> (type, values) with type 3 SHORT, 4 LONG or 12 DOUBLE; the offsets and byte counts of
    the blocks are filled in. Values that do not fit in the entry follow the IFD."""
    e = ">" if big else "<"
    out = bytearray(b"MM\x00\x2a" if big else b"II\x2a\x00") + b"\0\0\0\0"
    offsets = []
    for b in blocks:
        offsets.append(len(out))
        out += b + b"\0" * (len(b) & 1)
    tags = {256: (4, [w]), 257: (4, [h]), **tags}
    tags[324 if tiled else 273] = (4, offsets)
    tags[325 if tiled else 279] = (4, [len(b) for b in blocks])
    fmt = {3: "H", 4: "I", 12: "d"}
    ifd_at = len(out)
    extra_at = ifd_at + 2 + 12 * len(tags) + 4
    entries, extra = b"", b""
    for tag in sorted(tags):
        typ, values = tags[tag]
        data = struct.pack(e + fmt[typ] * len(values), *values)
        if len(data) <= 4:
            value = data.ljust(4, b"\0")
        else:
            value = struct.pack(e + "I", extra_at + len(extra))
            extra += data + b"\0" * (len(data) & 1)
        entries += struct.pack(e + "HHI", tag, typ, len(values)) + value
    out += struct.pack(e + "H", len(tags)) + entries + b"\0\0\0\0" + extra
    out[4:8] = struct.pack(e + "I", ifd_at)
    return bytes(out)


def pack_bits(values, bits):
    """Rows of `bits`-bit samples, most significant first, each row padded to a byte."""
    out = bytearray()
    for row in values:
        acc, n = 0, 0
        for v in row:
            acc, n = (acc << bits) | int(v), n + bits
            while n >= 8:
                out.append((acc >> (n - 8)) & 0xFF)
                n -= 8
        if n:
            out.append((acc << (8 - n)) & 0xFF)
    return bytes(out)


def tiffcp(data, *args):
    """Debian's tiffcp (libtiff-tools) rewriting a file: another layout, compression or order."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.tif"), os.path.join(d, "out.tif")
        with open(src, "wb") as f:
            f.write(data)
        subprocess.run(["tiffcp", *args, src, dst], check=True, capture_output=True)
        with open(dst, "rb") as f:
            return f.read()


def tiff_cases(img):
    """Layouts Pillow reads and does not write itself: bit depths, signed and big-endian samples,
    premultiplied alpha, palettes, tiles, separate planes, predictors, fill order, orientation,
    YCbCr subsampling, strips without RowsPerStrip."""
    out = {}
    rgb = np.asarray(img)
    h, w = rgb.shape[:2]
    grey = np.asarray(img.convert("L")).astype(np.uint32)
    photo, spp, bps, comp, fmt, extra, rows, cmap, orient = 262, 277, 258, 259, 339, 338, 278, 320, 274
    raw_zip = lambda data, c: data if c == 1 else zlib.compress(data)  # noqa: E731

    def grey_file(bits, photometric, c):
        v = grey >> (8 - bits)
        return tiff_file(w, h, {bps: (3, [bits]), comp: (3, [c]), photo: (3, [photometric])},
                         [raw_zip(pack_bits(v, bits), c)])

    out["tiff-L2-raw"] = grey_file(2, 1, 1)
    out["tiff-L2-miniswhite-deflate"] = grey_file(2, 0, 8)
    out["tiff-L4-miniswhite-raw"] = grey_file(4, 0, 1)
    out["tiff-L4-deflate"] = grey_file(4, 1, 8)
    out["tiff-L8-miniswhite-deflate"] = grey_file(8, 0, 8)
    out["tiff-I12-raw"] = tiff_file(w, h, {bps: (3, [12]), photo: (3, [1])}, [pack_bits(grey * 16 + 7, 12)])
    signed = (grey.astype(np.int32) * 3 - 300).astype(np.int16)
    for big in (False, True):
        order = ">" if big else "<"
        name = "-be" if big else ""
        for c, cname in ((1, "raw"), (8, "deflate")):
            s16 = signed.astype(order + "i2").tobytes()
            out[f"tiff-I16S{name}-{cname}"] = tiff_file(
                w, h, {bps: (3, [16]), photo: (3, [1]), fmt: (3, [2]), comp: (3, [c])}, [raw_zip(s16, c)], big)
            f32 = (grey.astype(np.float32) * 1.7 - 40.25).astype(order + "f4").tobytes()
            out[f"tiff-F32{name}-{cname}"] = tiff_file(
                w, h, {bps: (3, [32]), photo: (3, [1]), fmt: (3, [3]), comp: (3, [c])}, [raw_zip(f32, c)], big)
            u16 = (grey * 3).astype(order + "u2").tobytes()
            out[f"tiff-I16{name}-{cname}"] = tiff_file(
                w, h, {bps: (3, [16]), photo: (3, [1]), comp: (3, [c])}, [raw_zip(u16, c)], big)
    lx = np.stack([grey, 255 - grey], -1).astype(np.uint8).tobytes()
    out["tiff-LX-raw"] = tiff_file(w, h, {bps: (3, [8, 8]), photo: (3, [1]), spp: (3, [2]), extra: (3, [0])}, [lx])
    alpha = (np.arange(w)[None, :] * 11 + np.arange(h)[:, None] * 5) % 256
    pre = np.concatenate([(rgb.astype(np.uint32) * alpha[..., None] // 255), alpha[..., None]], -1)
    rgba16 = (pre * 257).astype("<u2").tobytes()
    for c, cname in ((1, "raw"), (8, "deflate")):
        tags = {bps: (3, [16] * 4), photo: (3, [2]), spp: (3, [4]), extra: (3, [1]), comp: (3, [c])}
        out[f"tiff-RGBa16-{cname}"] = tiff_file(w, h, tags, [raw_zip(rgba16, c)])
    planes = [pre[..., i].astype(np.uint8).tobytes() for i in range(4)]
    tags = {bps: (3, [8] * 4), photo: (3, [2]), spp: (3, [4]), extra: (3, [1]), 284: (3, [2])}
    out["tiff-RGBa-separate-deflate"] = tiff_file(w, h, {**tags, comp: (3, [8])}, [zlib.compress(p) for p in planes])
    out["tiff-RGBa-separate-raw"] = tiff_file(w, h, tags, planes)
    unassoc = {**tags, extra: (3, [2]), comp: (3, [8])}
    out["tiff-RGBA-separate-deflate"] = tiff_file(w, h, unassoc, [zlib.compress(p) for p in planes])
    for bits, c in ((4, 1), (2, 8)):
        n = 1 << bits
        colours = [(i * 4099 + 17) % 65536 for i in range(3 * n)]
        v = grey >> (8 - bits)
        out[f"tiff-P{bits}-{'raw' if c == 1 else 'deflate'}"] = tiff_file(
            w, h, {bps: (3, [bits]), photo: (3, [3]), comp: (3, [c]), cmap: (3, colours)},
            [raw_zip(pack_bits(v, bits), c)])
    rgb_bytes = rgb.tobytes()
    base = {bps: (3, [8, 8, 8]), photo: (3, [2]), spp: (3, [3])}
    out["tiff-RGB-no-rowsperstrip-raw"] = tiff_file(w, h, base, [rgb_bytes])
    out["tiff-RGB-no-rowsperstrip-deflate"] = tiff_file(w, h, {**base, comp: (3, [8])}, [zlib.compress(rgb_bytes)])
    strips = [rgb[y:y + 5].tobytes() for y in range(0, h, 5)]
    out["tiff-RGB-rows5-raw"] = tiff_file(w, h, {**base, rows: (4, [5])}, strips)
    reversed_bits = bytes(int(f"{b:08b}"[::-1], 2) for b in rgb_bytes)
    out["tiff-RGB-fillorder2-raw"] = tiff_file(w, h, {**base, 266: (3, [2])}, [reversed_bits])
    out["tiff-RGBX16-fillorder2-raw"] = tiff_file(
        w, h, {bps: (3, [16] * 4), photo: (3, [2]), spp: (3, [4]), extra: (3, [0]), 266: (3, [2])},
        [np.zeros((h, w, 4), "<u2").tobytes()])
    tiles = []
    for ty in range(0, h, 16):
        for tx in range(0, w, 16):
            t = np.zeros((16, 16, 3), np.uint8)
            part = rgb[ty:ty + 16, tx:tx + 16]
            t[: part.shape[0], : part.shape[1]] = part
            tiles.append(t.tobytes())
    tiled = {**base, 322: (4, [16]), 323: (4, [16])}
    out["tiff-RGB-tiled-raw"] = tiff_file(w, h, tiled, tiles, tiled=True)
    out["tiff-RGB-tiled-deflate"] = tiff_file(w, h, {**tiled, comp: (3, [8])}, [zlib.compress(t) for t in tiles],
                                              tiled=True)
    raw_rgb = save(img, "TIFF")
    for name, args in {"lzw-predictor": ["-c", "lzw:2"], "zip-predictor": ["-c", "zip:2"],
                       "tiled-lzw": ["-t", "-w", "16", "-l", "16", "-c", "lzw"],
                       "separate-lzw": ["-p", "separate", "-c", "lzw"], "rows3-packbits": ["-r", "3", "-c", "packbits"],
                       "jpeg-ycbcr": ["-c", "jpeg"], "jpeg-rgb": ["-c", "jpeg:r"],
                       "tiled-jpeg-ycbcr": ["-t", "-w", "16", "-l", "16", "-c", "jpeg"],
                       "big-endian-lzw": ["-B", "-c", "lzw"]}.items():
        out[f"tiff-RGB-tiffcp-{name}"] = tiffcp(raw_rgb, *args)
    modes = corpus.modes(img)
    for mode in ("I;16", "F", "I", "CMYK"):
        name = mode.replace(";", "_")
        out[f"tiff-{name}-tiffcp-big-endian-zip"] = tiffcp(save(modes[mode], "TIFF"), "-B", "-c", "zip")
    bw = img.convert("1")
    out["tiff-1-tiffcp-group4-fillorder2"] = tiffcp(save(bw, "TIFF"), "-f", "lsb2msb", "-c", "g4")
    for o in (3, 5, 6, 8):
        out[f"tiff-1-group4-orientation{o}"] = save(bw, "TIFF", compression="group4", tiffinfo={274: o})
        out[f"tiff-RGB-lzw-orientation{o}"] = save(img, "TIFF", compression="tiff_lzw", tiffinfo={274: o})
        out[f"tiff-RGB-raw-orientation{o}"] = save(img, "TIFF", tiffinfo={274: o})
    ycc = img.convert("YCbCr")
    # Pillow's encoder writes YCbCr unsubsampled only; tiffcp's JPEG files above are 2x2.
    out["tiff-YCbCr-jpeg-sub11"] = save(ycc, "TIFF", compression="jpeg", tiffinfo={530: (1, 1)})
    out["tiff-LAB-raw"] = save(img.convert("LAB"), "TIFF")
    # Old-style JPEG (compression 6): the strip is a whole JPEG stream, JPEGInterchangeFormat
    # points at it; Pillow reads it as YCbCr whatever PhotometricInterpretation says.
    jpg = save(img, "JPEG", quality=90)
    ojpeg = {bps: (3, [8, 8, 8]), comp: (3, [6]), spp: (3, [3]), rows: (4, [h]), 530: (3, [2, 2]),
             513: (4, [8]), 514: (4, [len(jpg)])}
    out["tiff-ojpeg"] = tiff_file(w, h, {**ojpeg, photo: (3, [6])}, [jpg])
    out["tiff-ojpeg-photometric-rgb"] = tiff_file(w, h, {**ojpeg, photo: (3, [2])}, [jpg])
    cmyk16 = (np.asarray(img.convert("CMYK")).astype(np.uint32) * 257).astype("<u2").tobytes()
    out["tiff-CMYK16-raw"] = tiff_file(w, h, {bps: (3, [16] * 4), photo: (3, [5]), spp: (3, [4])}, [cmyk16])
    out.update(fax_cases())
    # A PhotometricInterpretation of two values: Pillow drops it (min-is-white, the default).
    bits = (np.asarray(bw) > 0).astype(np.uint32)
    out["tiff-1-photometric-two-values"] = tiff_file(w, h, {bps: (3, [1]), photo: (3, [1, 1])},
                                                     [pack_bits(bits, 1)])
    out["tiff-1-group3-photometric-two-values"] = tiff_file(
        w, h, {bps: (3, [1]), comp: (3, [3]), photo: (3, [1, 1])}, [fax_strip(bw, "group3")])
    return out


def one_strip(data):
    """(offset, byte count) of a one-strip TIFF's strip."""
    with Image.open(io.BytesIO(data)) as im:
        (at,), (n,) = im.tag_v2[273], im.tag_v2[279]
    return at, n


def fax_strip(bw, compression):
    """The one strip of Pillow's fax-coded TIFF of a bilevel image."""
    data = save(bw, "TIFF", compression=compression)
    at, n = one_strip(data)
    return data[at:at + n]


def fax_cases():
    """Fax-coded strips with a bad code word half way: libtiff writes no pixels for some lines
    after it, leaving those rows of the strip buffer as they were, which Pillow's decoder has
    zeroed (white rows). A 48x40 pattern with black in every row; the first three bit flips
    from the middle of the strip after which Pillow gives an all-white row."""
    y, x = np.mgrid[0:40, 0:48]
    bw = Image.fromarray((((x // 3 + y // 2) % 2) * 255).astype(np.uint8)).convert("1")
    out = {}
    for compression in ("group4", "group3"):
        data = save(bw, "TIFF", compression=compression)
        at, n = one_strip(data)
        found = 0
        for i in range(at + n // 2, at + n):
            flipped = bytearray(data)
            flipped[i] ^= 0x10
            try:
                with Image.open(io.BytesIO(bytes(flipped))) as im:
                    rows = np.asarray(im.convert("L"))
            except Exception:  # noqa: BLE001 - Pillow refuses this one: not the case wanted
                continue
            if (rows.min(axis=1) == 255).any():
                out[f"tiff-1-{compression}-bad-code-word-{found}"] = bytes(flipped)
                found += 1
                if found == 3:
                    break
    return out


def reference(data):
    """Pillow's Image.open(p).convert('RGB') of the bytes, or the exception it raised."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            mode = im.mode
            rgb = im.convert("RGB")
            return {"mode": mode, "width": rgb.width, "height": rgb.height}, rgb.tobytes()
    except Exception as e:  # noqa: BLE001 - any exception is a refusal
        # Without the object's address, so that the file is the same on every run.
        return {"refused": re.sub(r" <[^>]* at 0x[0-9a-f]+>", "", f"{type(e).__name__}: {e}")[:200]}, None


def main():
    if PIL.__version__ != "13.0.0":
        sys.exit(f"Pillow {PIL.__version__}: the references must come from Pillow 13.0.0")
    warnings.simplefilter("ignore")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/fixtures/conformance")
    img = corpus.base()
    files = {}
    for mode, im in corpus.modes(img).items():
        for vname, saver in corpus.variants():
            try:
                files[f"{mode.replace(';', '_')}.{vname}"] = saver(im)
            except (ValueError, OSError, KeyError, TypeError):
                pass  # this format cannot hold this mode (or option)
    files.update(corpus.animated(img))
    files["planar-tiled.tif"] = corpus.planar_tiled_tiff(20, 20, 16)
    files["planar-tiled-exact.tif"] = corpus.planar_tiled_tiff(32, 16, 16)
    rng = random.Random(18)
    for name, data in list(files.items()):
        files.update(corpus.damaged(name, data, rng))
    for cases in (jpeg_cases, gif_cases, bmp_cases, png_cases, tiff_cases):
        files.update(cases(img))
    fdir = os.path.join(out_dir, "files")
    os.makedirs(fdir, exist_ok=True)
    for old in os.listdir(fdir):
        os.remove(os.path.join(fdir, old))
    expected, blob = {}, bytearray()
    for name in sorted(files):
        with open(os.path.join(fdir, name), "wb") as f:
            f.write(files[name])
        meta, rgb = reference(files[name])
        if rgb is not None:
            meta["offset"] = len(blob)
            blob += rgb
        expected[name] = meta
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=0, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "expected.rgb"), "wb") as f:
        f.write(blob)
    decoded = sum("refused" not in m for m in expected.values())
    print(f"{len(files)} files ({decoded} decoded by Pillow), {len(blob)} reference bytes")


if __name__ == "__main__":
    main()
