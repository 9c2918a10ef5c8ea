"""What the benchmark scripts share: their flags, a timed run of a sweep, runs into an emptied
output folder, and Pillow's side of crop-resize.

The scripts run as `python scripts/bench/NAME.py`, so this folder is on their sys.path and
`from benchlib import flags` finds this module.
"""
import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time


def flags(doc=None, **defaults):
    """An ArgumentParser with one `--name` per keyword (underscores become dashes).

    A keyword's value is its default, whose type is the flag's type (str when the default is
    None); False makes a switch (store_true). A (default, help) pair adds a help text.
    """
    ap = argparse.ArgumentParser(description=doc)
    for name, spec in defaults.items():
        default, text = spec if isinstance(spec, tuple) else (spec, None)
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            ap.add_argument(flag, action="store_true", help=text)
        elif default is None:
            ap.add_argument(flag, help=text)
        else:
            ap.add_argument(flag, type=type(default), default=default, help=text)
    return ap


def run_sweep_timed(cmd, key):
    """Runs a sweep command line: its wall time in seconds and the epoch each stopped trial
    stopped at, by `key(trial_end_record)`. Exits the script with sweep's stderr when it fails."""
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"sweep failed: {p.stderr[-3000:]}")
    stopped = {}
    for line in p.stdout.splitlines():
        r = json.loads(line)
        if r["type"] == "trial" and r["event"] == "end" and r["status"] == "stopped":
            stopped[key(r)] = r["stopped_at"]
    return wall, stopped


def pillow_crop_resize(src, dst, r):
    """What crop-resize does, done by Pillow: open, convert('RGB'), crop the centred square of
    side min(w, h), resize((r, r), LANCZOS), save (the format by dst's extension)."""
    from PIL import Image
    im = Image.open(src).convert("RGB")
    w, h = im.size
    s = min(w, h)
    im = im.crop(((w - s) // 2, (h - s) // 2, (w + s) // 2, (h + s) // 2)).resize((r, r), Image.LANCZOS)
    im.save(dst)


def run_jobs(fn, jobs, procs, chunksize):
    """fn(*job) for every job: in this process when procs is 1, else in a pool of procs."""
    if procs == 1:
        for j in jobs:
            fn(*j)
    else:
        with mp.Pool(procs) as pool:
            pool.starmap(fn, jobs, chunksize=chunksize)


def fresh_runs(fn, out, repeat):
    """fn(out) repeat times, with out emptied before each run (so that nothing is skipped as done
    already): their results."""
    results = []
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        results.append(fn(out))
    return results
