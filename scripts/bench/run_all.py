"""The body of scripts/bench/run: runs each benchmark script, parses its figures, prints one table.

Each row: benchmark, case, our figure, the anchor's, unit, ratio (ours / anchor, higher is better
for throughputs). Rows without an anchor have ratio "-"."""
import argparse, json, os, re, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "scripts", "bench")


def sh(cmd, env=None):
    """Runs cmd, returns stdout; stderr goes to ours (progress of the long runs)."""
    e = dict(os.environ, **(env or {}))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=e, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}")
    return r.stdout


def last_json(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def crop_resize(a, rows):
    out = sh([sys.executable, f"{BENCH}/crop_resize.py", "--n", "40" if a.quick else "120"])
    res = last_json(out)[-1]
    cores = res["cores"]
    for r in res["rows"]:
        rows.append(("crop-resize", f"{r['case']}, {cores} cores", r[f"ours_j{cores}_img_s"], r[f"pillow_{cores}proc_img_s"],
                     f"Pillow, {cores} processes", "img/s"))
        rows.append(("crop-resize", f"{r['case']}, 1 core", r["ours_j1_img_s"], r["pillow_1proc_img_s"], "Pillow, 1 process", "img/s"))


def crop_resize_photos(a, rows):
    sizes = "256" if a.quick else "256,1024"
    out = sh([sys.executable, f"{BENCH}/crop_resize_photos.py", "--sizes", sizes, "--repeat", "1" if a.quick else "2"])
    res = last_json(out)[-1]
    cores = res["cores"]
    for r in res["rows"]:
        assert r["max_abs_diff"] == 0, f"crop-resize differs from Pillow on {r['case']} photos"
        rows.append(("crop-resize photos", f"{r['case']}, {cores} cores", r[f"ours_j{cores}_img_s"], r[f"pillow_{cores}proc_img_s"],
                     f"Pillow, {cores} processes", "img/s"))
        rows.append(("crop-resize photos", f"{r['case']}, 1 core", r["ours_j1_img_s"], r["pillow_1proc_img_s"], "Pillow, 1 process", "img/s"))
        rows.append(("crop-resize photos", f"{r['case']}, peak memory, 1 core", r["ours_j1_peak_mib"], r["pillow_peak_mib"],
                     "Pillow, 1 process (lower is better)", "MiB"))


def image_loader(a, rows):
    out = sh([sys.executable, f"{BENCH}/image_loader.py", "--images", "256" if a.quick else "512"])
    res = last_json(out)[-1]
    for r in res["rows"]:
        if r["transform"] == "val":
            assert r["max_abs_diff"] == 0, "the evaluation transform differs from torchvision's"
        rows.append(("ddp-train image loader", f"{r['transform']} transform, {r['workers']} worker(s)", r["ours_img_s"],
                     r["torchvision_img_s"], f"torchvision DataLoader, {r['workers']} worker(s)", "img/s"))


def image_train(a, rows):
    for size in ["64"] if a.quick else ["64", "112"]:
        r = last_json(sh([sys.executable, f"{BENCH}/image_train.py", "--size", size]))[-1]
        rows.append(("ddp-train on JPEGs", f"{r['model']} {size}², batch {r['batch']}, CPU", r["ours_img_s"],
                     r["pytorch_img_s"], "PyTorch ImageFolder + DataLoader loop", "img/s"))


def gather_npz(a, rows):
    out = sh([sys.executable, f"{BENCH}/gather_npz.py", "--n", "5000" if a.quick else "20000"])
    r = last_json(out)[-1]
    assert r["identical"], "gather-npz result differs from numpy's"
    rows.append(("gather-npz", f"{r['files']} files of {r['shape']}", r["files"] / r["gather_npz_s"], r["files"] / r["numpy_s"],
                 "numpy loop (np.load, concatenate, savez)", "files/s"))


def all_reduce(a, rows):
    sizes = ["1", "8", "64"] if a.quick else ["1", "8", "64", "256"]
    out = sh([sys.executable, f"{BENCH}/all_reduce.py", "--json", "--sizes-mib", *sizes])
    for r in last_json(out):
        rows.append(("all-reduce-check", f"{r['ranks']} ranks, {r['mib']} MiB, CPU ring", r["ours_busbw"], r["gloo_busbw"],
                     "torch.distributed gloo", "busbw GB/s"))


def ddp_train(a, rows):
    env = {"SEEDS": "1" if a.quick else "3", "COMPILE": "1"}
    out = sh(["bash", f"{BENCH}/ddp_train.sh", a.device, "3" if a.quick else "10"], env)
    m = re.search(r"mean: ddp-train ([\d.]+) .*PyTorch ([\d.]+)", out)
    if m:
        rows.append(("ddp-train", "digits val top-1 (parity)", float(m[1]), float(m[2]), "PyTorch, same init", "%"))
    batch, table = None, {}
    for line in out.splitlines():
        if line.startswith("batch "):
            batch = line.split()[1]
        m = re.match(r"\s+(.+?)\s{2,}(\d+)\s+\((\d+)\)", line)
        if m and batch:
            table[(batch, m[1])] = float(m[2])
    for (b, label), v in table.items():
        if not label.startswith("ddp-train"):
            continue
        if a.device == "cpu":
            anchor = table.get((b, "PyTorch fp32"))
            rows.append(("ddp-train", f"batch {b}, {label[10:]}", v, anchor, "PyTorch fp32", "img/s"))
        else:
            for ref in ("PyTorch eager bf16, channels_last", "PyTorch compile(reduce-overhead)+fused SGD bf16 CL"):
                if "graphs bf16" in label or ("eager" in label and "compile" not in ref):
                    anchor = table.get((b, ref))
                    rows.append(("ddp-train", f"batch {b}, {label[10:]}", v, anchor, ref, "img/s"))


def projection(a, rows):
    out = sh(["bash", f"{BENCH}/project.sh", "10" if a.quick else "150"])
    for line in out.splitlines():
        m = re.match(r"project (\d+)x\d+ batch (\d+) (\d+) steps (\S+).*?: ([\d.]+) img/s", line)
        if m:
            note = "upstream H100: 1/17.6 img/s at 1024, 1/13.3 at 256 (150 steps)"
            rows.append(("project-one-gpu", f"{m[1]}², batch {m[2]}, {m[3]} steps, {m[4]}", float(m[5]), None, note, "img/s"))


def pipeline(a, rows):
    env = {"STEPS": "2", "BATCH": "16", "EPOCHS": "1"} if a.device == "cpu" or a.quick else {}
    out = sh(["bash", f"{BENCH}/pipeline.sh", a.device], env)
    case, one = None, None
    for line in out.splitlines():
        if line.startswith("## "):
            case, one = line[3:].split(",")[0], None
            continue
        m = re.match(r"(.+?)\s{2,}([\d.]+)\s+[\d.]+ ms/step", line)
        if not (m and case):
            continue
        label, v = m[1].strip(), float(m[2])
        if label.startswith("one device") and label.endswith("eager"):
            one = v
        elif label.startswith("split"):
            rows.append(("ddp-train pipeline", f"{case}, {label}", v, one, "one device, eager", "img/s"))


BENCHES = {"crop-resize": crop_resize, "crop-resize-photos": crop_resize_photos, "gather-npz": gather_npz, "all-reduce": all_reduce, "ddp-train": ddp_train, "projection": projection,
           "pipeline": pipeline, "image-loader": image_loader, "image-train": image_train}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller inputs and fewer seeds (a few minutes on 2 cores)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when torch sees one)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--only", default=None, help="comma-separated subset of: " + ",".join(BENCHES))
    a = ap.parse_args()
    if a.device is None:
        import torch
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    names = a.only.split(",") if a.only else list(BENCHES)
    rows, failed = [], []
    for n in names:
        t = time.time()
        print(f"# {n} ...", file=sys.stderr, flush=True)
        try:
            BENCHES[n](a, rows)
        except Exception as e:  # one benchmark failing must not hide the others
            failed.append(f"{n}: {e}")
        print(f"# {n}: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    w = max([len(f"{r[0]}: {r[1]}") for r in rows] + [10])
    print(f"{'benchmark':<{w}} {'ours':>11} {'anchor':>11} {'ratio':>7}  unit, anchor")
    for b, case, ours, anchor, aname, unit in rows:
        ratio = f"{ours / anchor:6.2f}x" if anchor else "      -"
        anc = f"{anchor:11.2f}" if anchor else f"{'-':>11}"
        print(f"{b + ': ' + case:<{w}} {ours:11.2f} {anc} {ratio}  {unit}, {aname}")
    for f in failed:
        print(f"FAILED {f}")
    doc = {"device": a.device, "quick": a.quick, "cores": os.cpu_count(), "failed": failed,
           "rows": [dict(benchmark=b, case=c, ours=o, anchor=an, anchor_name=nm, unit=u, ratio=(o / an if an else None))
                    for b, c, o, an, nm, u in rows]}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(json.dumps(doc))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
