#!/usr/bin/env python3
"""crop-resize vs Pillow on real photos (2-16 MP wallpapers from Debian's packages), the same work
on both sides: decode, convert('RGB'), centre crop, LANCZOS resize, write PNG. Per format (JPEG,
PNG, WebP) and output size: images/s and MP/s (megapixels of input decoded per second) on one core
and on all cores, the peak memory of one process on one core, and max |delta| (must be 0). Then
where our time goes (the decoding of the centre squares alone, the resize, the PNG encoding:
from the imaging crate's crop_rate example, when it is built), which bounds the ratio any exact
pipeline on the same decoders can reach, and for JPEG libjpeg-turbo's entropy decoding alone.

  .venv/bin/python scripts/bench/crop_resize_photos.py [--sizes 256,1024] [--repeat 2]
      [--cache ~/.cache/shardkit-bench/wallpapers] [--workdir /tmp/shardkit-bench-photos]

The photos come from `apt-get download mate-backgrounds ukui-wallpapers lomiri-wallpapers-20.04
gnome-backgrounds`, unpacked with `dpkg-deb -x` into the cache the first time. Pillow runs in one
process and in a pool of all cores; crop-resize with -j1 and -j(all cores). Each timing is the best
of --repeat runs with the outputs removed between runs (so nothing is skipped). Peak memory is the
largest resident set of the process doing the whole format on one core (Python's own ~30 MB
included on Pillow's side).
"""
import glob, json, os, shutil, subprocess, sys, time

import numpy as np
from PIL import Image
from benchlib import flags, fresh_runs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))
PACKAGES = ["mate-backgrounds", "ukui-wallpapers", "lomiri-wallpapers-20.04", "gnome-backgrounds"]
FORMATS = {"JPEG": "jpeg", "PNG": "png", "WEBP": "webp"}

# The Pillow side, run in its own process so that its peak memory can be read: reads
# "src\tdst\tR" lines on stdin; its arguments are the number of processes and this folder
# (for benchlib).
PILLOW_WORKER = r"""
import sys
sys.path.insert(0, sys.argv[2])
from PIL import Image
from benchlib import pillow_crop_resize, run_jobs
Image.MAX_IMAGE_PIXELS = None

if __name__ == "__main__":
    jobs = [l.rstrip("\n").split("\t") for l in sys.stdin if l.strip()]
    run_jobs(pillow_crop_resize, [(src, dst, int(r)) for src, dst, r in jobs], int(sys.argv[1]), 1)
"""


# The floor under any exact JPEG pipeline built on libjpeg-turbo, ours as Pillow's: the entropy
# decoding that every pixel of the crop needs (a row's Huffman codes, and for a progressive file
# every scan's, are read in order: a crop cannot skip them). Timed as jpeg_read_coefficients on
# each file already in memory, the best of two passes, built against the libjpeg-turbo that
# crop-resize links (turbojpeg-sys's, found under target/release/build).
ENTROPY_FLOOR_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <jpeglib.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  double best = 1e30;
  for (int pass = 0; pass < 2; pass++) {
    double total = 0;
    for (int i = 1; i < argc; i++) {
      FILE *f = fopen(argv[i], "rb");
      if (!f) return 1;
      fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
      unsigned char *buf = malloc(n);
      if (fread(buf, 1, n, f) != (size_t)n) return 1;
      fclose(f);
      struct jpeg_decompress_struct c; struct jpeg_error_mgr e;
      c.err = jpeg_std_error(&e);
      double t = now();
      jpeg_create_decompress(&c); jpeg_mem_src(&c, buf, n); jpeg_read_header(&c, TRUE);
      jpeg_read_coefficients(&c); jpeg_finish_decompress(&c); jpeg_destroy_decompress(&c);
      total += now() - t;
      free(buf);
    }
    if (total < best) best = total;
  }
  printf("%.6f\n", best);
  return 0;
}
"""


def entropy_floor(paths, workdir):
    """Seconds libjpeg-turbo takes to entropy-decode these JPEGs on one core, or None when the
    library or a C compiler is not at hand."""
    libs = sorted(glob.glob(os.path.join(ROOT, "target", "release", "build", "turbojpeg-sys-*", "out")))
    libs = [d for d in libs if os.path.exists(f"{d}/lib/libjpeg.a") and os.path.exists(f"{d}/include/jpeglib.h")]
    if not libs or not shutil.which("cc"):
        return None
    os.makedirs(workdir, exist_ok=True)
    src, exe = f"{workdir}/entropy_floor.c", f"{workdir}/entropy_floor"
    open(src, "w").write(ENTROPY_FLOOR_C)
    d = max(libs, key=lambda d: os.path.getmtime(f"{d}/lib/libjpeg.a"))
    subprocess.run(["cc", "-O2", "-o", exe, src, f"-I{d}/include", f"{d}/lib/libjpeg.a"], check=True)
    return float(subprocess.run([exe, *paths], check=True, capture_output=True, text=True).stdout)


def decode_floor(paths, r):
    """Seconds crop-resize's decoders take for these files' centre squares alone (one thread,
    files in memory; libjpeg-turbo, libwebp and our PNG reader, as crop-resize calls them), with
    the resize and PNG encoding timed apart: from the imaging crate's crop_rate example, built
    beside the binaries (cargo build --release -p imaging --example crop_rate). None without it."""
    exe = os.path.join(BIN, "examples", "crop_rate")
    if not os.path.exists(exe):
        print(f"{exe} is not built: no decode floor (cargo build --release -p imaging --example crop_rate)",
              file=sys.stderr)
        return None
    out = subprocess.run([exe, str(r), "2", *paths], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def fetch(cache):
    """The photos, by format: downloads and unpacks the packages the first time."""
    unpacked = os.path.join(cache, "x")
    if not os.path.isdir(unpacked):
        os.makedirs(cache, exist_ok=True)
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=cache, check=True, stdout=subprocess.DEVNULL)
        for deb in glob.glob(os.path.join(cache, "*.deb")):
            subprocess.run(["dpkg-deb", "-x", deb, unpacked + ".tmp"], check=True)
        os.rename(unpacked + ".tmp", unpacked)
    by_format = {f: [] for f in FORMATS}
    for p in sorted(glob.glob(os.path.join(unpacked, "**", "*"), recursive=True)):
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        try:
            with Image.open(p) as im:
                fmt, size = im.format, im.size
        except Exception:
            continue
        if fmt in by_format and size[0] * size[1] >= 1_000_000:
            by_format[fmt].append((p, size[0] * size[1]))
    return by_format


def timed(cmd, stdin):
    """Runs cmd; returns (seconds, peak resident set in MiB)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    proc.stdin.write(stdin.encode())
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[0]} failed ({status})")
    return elapsed, usage.ru_maxrss / 1024


def run_pillow(items, out, r, procs):
    lines = "".join(f"{p}\t{out}/{i:04d}.png\t{r}\n" for i, (p, _) in enumerate(items))
    return timed([sys.executable, "-c", PILLOW_WORKER, str(procs), os.path.dirname(os.path.abspath(__file__))], lines)


def run_ours(items, out, r, jobs):
    # Inputs are symlinks named like Pillow's outputs, so that the two output trees match.
    links = out + ".in"
    shutil.rmtree(links, ignore_errors=True)
    os.makedirs(links)
    names = []
    for i, (p, _) in enumerate(items):
        os.symlink(p, f"{links}/{i:04d}{os.path.splitext(p)[1]}")
        names.append(f"{links}/{i:04d}{os.path.splitext(p)[1]}")
    return timed([f"{BIN}/crop-resize", "-q", "-r", str(r), "-o", out, "--base", links, "-j", str(jobs)], "\n".join(names))


def best(fn, out, repeat):
    runs = fresh_runs(fn, out, repeat)
    return min(t for t, _ in runs), max(m for _, m in runs)


def compare(a_dir, b_dir):
    mx = 0
    names = sorted(n for n in os.listdir(a_dir) if n.endswith(".png"))
    assert names == sorted(n for n in os.listdir(b_dir) if n.endswith(".png")), "different outputs"
    for name in names:
        a = np.asarray(Image.open(f"{a_dir}/{name}").convert("RGB"), dtype=np.int16)
        b = np.asarray(Image.open(f"{b_dir}/{name}").convert("RGB"), dtype=np.int16)
        mx = max(mx, int(np.abs(a - b).max()) if a.shape == b.shape else 255)
    return mx


def main():
    a = flags(sizes="256,1024", repeat=2, formats="JPEG,PNG,WEBP",
              cache=os.path.expanduser("~/.cache/shardkit-bench/wallpapers"),
              workdir="/tmp/shardkit-bench-photos").parse_args()
    cores = os.cpu_count()
    photos = fetch(a.cache)
    rows = []
    for fmt in a.formats.split(","):
        items = photos[fmt]
        if not items:
            print(f"no {fmt} photos found", file=sys.stderr)
            continue
        mp = sum(px for _, px in items) / 1e6
        for r in map(int, a.sizes.split(",")):
            w = f"{a.workdir}/{fmt}-{r}"
            p1, p1_mem = best(lambda o: run_pillow(items, o, r, 1), w + "/pil1", a.repeat)
            pn, _ = best(lambda o: run_pillow(items, o, r, cores), w + "/pil", a.repeat)
            o1, o1_mem = best(lambda o: run_ours(items, o, r, 1), w + "/ours1", a.repeat)
            on, on_mem = best(lambda o: run_ours(items, o, r, cores), w + "/ours", a.repeat)
            n = len(items)
            rows.append({"case": f"{fmt.lower()}->{r}", "images": n, "megapixels": round(mp, 1),
                         "pillow_1proc_img_s": n / p1, f"pillow_{cores}proc_img_s": n / pn,
                         "ours_j1_img_s": n / o1, f"ours_j{cores}_img_s": n / on,
                         "pillow_1proc_mp_s": mp / p1, "ours_j1_mp_s": mp / o1,
                         "pillow_1proc_s": p1, "ours_j1_s": o1,
                         "ratio_j1_vs_pillow_1proc": p1 / o1, f"ratio_j{cores}_vs_pillow_{cores}proc": pn / on,
                         f"ours_j{cores}_vs_j1": o1 / on,
                         "pillow_peak_mib": p1_mem, "ours_j1_peak_mib": o1_mem, f"ours_j{cores}_peak_mib": on_mem,
                         "max_abs_diff": max(compare(w + "/pil1", w + "/ours1"), compare(w + "/pil1", w + "/ours"))})
            steps = decode_floor([p for p, _ in items], r)
            if steps is not None:
                rows[-1].update({"decode_s": steps["decode_s"], "resize_s": steps["resize_s"],
                                 "encode_s": steps["encode_s"], "decode_bound_ratio_j1": p1 / steps["decode_s"]})
            if fmt == "JPEG":
                floor = entropy_floor([p for p, _ in items], a.workdir)
                if floor is not None:
                    rows[-1].update({"entropy_floor_s": floor, "best_possible_ratio_j1": p1 / floor})
    print(f"{'case':<11} {'n':>3} {'MP':>6} {'Pillow 1p':>9} {'ours -j1':>8} {'x 1 core':>8} {'Pillow %dp' % cores:>9} "
          f"{'ours -j%d' % cores:>8} {'x all':>6} {'j%d/j1' % cores:>6} {'MP/s ours':>9} {'peak MiB P/ours':>15} {'max|d|':>6}")
    for r in rows:
        print(f"{r['case']:<11} {r['images']:>3} {r['megapixels']:>6} {r['pillow_1proc_img_s']:>9.2f} {r['ours_j1_img_s']:>8.2f} "
              f"{r['ratio_j1_vs_pillow_1proc']:>8.2f} {r[f'pillow_{cores}proc_img_s']:>9.2f} {r[f'ours_j{cores}_img_s']:>8.2f} "
              f"{r[f'ratio_j{cores}_vs_pillow_{cores}proc']:>6.2f} {r[f'ours_j{cores}_vs_j1']:>6.2f} {r['ours_j1_mp_s']:>9.1f} "
              f"{r['pillow_peak_mib']:>7.0f}/{r['ours_j1_peak_mib']:<7.0f} {r['max_abs_diff']:>6}")
    for r in rows:
        if "decode_s" in r:
            print(f"{r['case']}: decoding the centre squares alone takes {r['decode_s']:.2f} s (resize "
                  f"{r['resize_s']:.2f} s, PNG {r['encode_s']:.2f} s; one thread, files in memory; ours "
                  f"{r['ours_j1_s']:.2f} s, Pillow {r['pillow_1proc_s']:.2f} s): with these decoders, at most "
                  f"{r['decode_bound_ratio_j1']:.2f}x Pillow per core")
        if "entropy_floor_s" in r:
            print(f"{r['case']}: libjpeg's entropy decoding alone takes {r['entropy_floor_s']:.2f} s of these "
                  f"files (one core; ours {r['ours_j1_s']:.2f} s, Pillow {r['pillow_1proc_s']:.2f} s): an exact "
                  f"pipeline on libjpeg-turbo is at most {r['best_possible_ratio_j1']:.2f}x Pillow per core")
    print(json.dumps({"bench": "crop-resize-photos", "cores": cores, "rows": rows}))


if __name__ == "__main__":
    main()
