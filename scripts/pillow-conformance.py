#!/usr/bin/env python3
"""crop-resize against Pillow on a corpus, file by file: how many images give Pillow's pixels.

    .venv/bin/python scripts/pillow-conformance.py [CORPUS_DIR] [-r R] [--bin PATH] [--list]

Without CORPUS_DIR, fuzz/make-decode-corpus.py writes its corpus (every mode x option Pillow
writes, and damaged variants) to a temp dir. Each file goes through seed 000's pipeline in Pillow
(Image.open(p).convert('RGB'), centre crop, resize((R, R), LANCZOS)) and through one crop-resize
run (--format npy), and lands in one class: exact, both refuse, we refuse what Pillow decodes,
Pillow refuses what we decode, or different pixels (with the largest difference). Prints the
counts (and with --list the files of each class that is not exact or refused by both). A
measurement for issue 19, not a test: it exits 0 whatever it finds.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def pillow(path, r):
    """Seed 000's preprocessing: (pixels [3, r, r] uint8) or None when Pillow refuses the file."""
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = min(w, h)
            left, top = (w - s) // 2, (h - s) // 2
            im = im.crop((left, top, left + s, top + s)).resize((r, r), Image.LANCZOS)
            return np.asarray(im).transpose(2, 0, 1)
    except Exception:  # noqa: BLE001 - any refusal is "Pillow refuses"
        return None


def main():
    warnings.simplefilter("ignore")  # Pillow's notes on damaged files; the class says enough
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?")
    ap.add_argument("-r", type=int, default=16)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/crop-resize"))
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = a.corpus
        if corpus is None:
            corpus = os.path.join(tmp, "corpus")
            subprocess.run([sys.executable, os.path.join(ROOT, "fuzz/make-decode-corpus.py"), corpus],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        names = sorted(os.listdir(corpus))
        # Links named <file>.x: outputs <file>.npy stay distinct (a.png and a.png.trunc50 would
        # otherwise share one).
        links, out = os.path.join(tmp, "links"), os.path.join(tmp, "out")
        os.makedirs(links)
        for n in names:
            os.symlink(os.path.abspath(os.path.join(corpus, n)), os.path.join(links, n + ".x"))
        run = subprocess.run([a.bin, "-q", "-r", str(a.r), "--format", "npy", "-o", out, "--base", links, "-"],
                             input="".join(os.path.join(links, n + ".x") + "\n" for n in names),
                             capture_output=True, text=True)
        if run.returncode not in (0, 3):
            sys.exit(f"crop-resize died (exit {run.returncode}): {run.stderr[-2000:]}")
        ours = {}
        for line in run.stdout.splitlines():
            rec = json.loads(line)
            if rec["type"] == "image":
                ours[os.path.basename(rec["input"])[: -len(".x")]] = np.load(rec["output"])
        classes = collections.defaultdict(list)
        for n in names:
            theirs, mine = pillow(os.path.join(corpus, n), a.r), ours.get(n)
            if theirs is None and mine is None:
                classes["both refuse"].append(n)
            elif theirs is None:
                classes["Pillow refuses, we decode"].append(n)
            elif mine is None:
                classes["we refuse, Pillow decodes"].append(n)
            else:
                d = int(np.abs(theirs.astype(int) - mine.astype(int)).max())
                classes["exact" if d == 0 else "differ"].append(n if d == 0 else f"{n} (max |d| {d})")
    print(f"{len(names)} files, R={a.r}")
    for c in ["exact", "both refuse", "we refuse, Pillow decodes", "differ", "Pillow refuses, we decode"]:
        print(f"  {c:27} {len(classes[c])}")
        if a.list and c not in ("exact", "both refuse"):
            for n in classes[c]:
                print(f"      {n}")


if __name__ == "__main__":
    main()
