#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (not part of CI): the
# cargo-fuzz targets under fuzz/fuzz_targets and the atheris target for the Python network-pickle
# converter (fuzz/python/convert_network_pkl.py; its past finds are replayed in CI from
# fuzz/python/regressions by shared/stylegan2/tests/convert.rs).
#   scripts/fuzz.sh [SECONDS_PER_TARGET (60)] [TARGET...]
# Needs `cargo install cargo-fuzz` and a nightly toolchain (`rustup toolchain install nightly`);
# cmake for the vendored libjpeg-turbo comes from the project venv (scripts/env.sh); atheris is
# pip-installed into the venv on first use.
# Seeds: the Pillow reference inputs, fuzz/make-decode-corpus.py's files and the conformance
# corpus (images), a few
# npz/npy written with numpy, and records.
# Crashes land in fuzz/artifacts/<target>/; the summary line per target gives executions run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=/dev/null
source scripts/env.sh
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode_crop_resize npz_latent input_line tar_index recordio checkpoint_meta
  sweep_space sweep_journal slurm_output classes_txt shard_list_slurm convert_network_pkl)
corpus=fuzz/corpus
mkdir -p "$corpus"/{decode_crop_resize,npz_latent,input_line,tar_index,recordio,checkpoint_meta,sweep_space,sweep_journal,slurm_output,classes_txt,shard_list_slurm,convert_network_pkl} \
  fuzz/artifacts/convert_network_pkl
# The targets over ddp-train's parsers link libtorch (the train crate): found at run time here.
export LD_LIBRARY_PATH="$root/.venv/lib/python3.11/site-packages/torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cp -n tests/fixtures/pillow/inputs/* "$corpus/decode_crop_resize/" 2>/dev/null || true
# Every mode and compression Pillow writes, a planar tiled TIFF, and damaged variants of each;
# and the conformance corpus (hand-made JPEG warnings, GIF/BMP/PNG oddities).
.venv/bin/python fuzz/make-decode-corpus.py "$corpus/decode_crop_resize" 2>/dev/null >/dev/null
for f in tests/fixtures/conformance/files/*; do cp -n "$f" "$corpus/decode_crop_resize/conf-$(basename "$f")"; done
.venv/bin/python - "$corpus/npz_latent" <<'PY'
import io, os, sys, numpy as np
d = sys.argv[1]
w = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
np.savez(f"{d}/plain.npz", w=w)
np.savez_compressed(f"{d}/deflated.npz", w=w)
np.save(f"{d}/bare.npy", w)
np.save(f"{d}/f64.npy", w.astype(np.float64))
np.save(f"{d}/fortran.npy", np.asfortranarray(w.reshape(2, 4)))
PY
printf '%s\n' 'imgs/a/1.jpg' '{"type":"shard","shard":0,"shards":2,"paths":["a.jpg","b/c.png"]}' \
  '{"type":"image","input":"a.jpg","output":"out/a.png"}' '{"type":"latent","input":"a.jpg","output":"a.npz"}' \
  '{"type":"error","input":"x","error":"bad"}' '{"path":"p.jpg"}' | split -l 1 - "$corpus/input_line/seed-"
# Shards (webdataset's layout, a pax header among them), RecordIO (an index's length, the index,
# the .rec: a header record, a record cut at a magic word), checkpoint metadata, spaces, a journal.
.venv/bin/python - "$corpus" scripts/reference <<'PY'
import io, json, struct, sys, tarfile
d, ref = sys.argv[1], sys.argv[2]
for name, fmt in (("ustar", tarfile.USTAR_FORMAT), ("pax", tarfile.PAX_FORMAT)):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        long = "n" * (120 if fmt == tarfile.PAX_FORMAT else 90)
        for key, suffix, data in (("a/000", "jpg", b"\xff\xd8 jpeg"), ("a/000", "cls", b"3"),
                                  (long, "png", b"png"), (long, "json", b'{"label": 1}')):
            info = tarfile.TarInfo(f"{key}.{suffix}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    open(f"{d}/tar_index/{name}.tar", "wb").write(buf.getvalue())
sys.path.insert(0, ref)
from mxnet_recordio import MAGIC, pack, write
write(f"{d}/recordio/seed", [(0, pack([3.0, 3.0], b"")), (1, pack(1.0, b"ab" + struct.pack("<I", MAGIC) + b"cd")),
                             (2, pack([2.0, 0.5], b"image"))])
idx, rec = open(f"{d}/recordio/seed.idx", "rb").read(), open(f"{d}/recordio/seed.rec", "rb").read()
open(f"{d}/recordio/seed", "wb").write(struct.pack("<H", len(idx)) + idx + rec)
for ext in ("idx", "rec"):
    __import__("os").remove(f"{d}/recordio/seed.{ext}")
meta = {"epoch": "3", "step": "17", "steps_per_epoch": "40", "seed": "-5", "skipped_steps": "2",
        "arch": "resnet18", "best_top1": "41.5", "val_top1": "40.25", "scaler": "true",
        "loss_scale": "32768", "growth_tracker": "17", "world_size": "2", "batch_size": "64",
        "classes": json.dumps(["cat", "dog"]), "stem": "cifar", "num_classes": "10", "image_size": "32",
        "normalize_mean": "[0.49, 0.48, 0.45]", "normalize_std": "[0.25, 0.24, 0.26]",
        "eval_transform": "none"}
json.dump(meta, open(f"{d}/checkpoint_meta/mid-epoch.json", "w"))
json.dump({"epoch": "1"}, open(f"{d}/checkpoint_meta/bare.json", "w"))
spaces = [{"lr": {"loguniform": [1e-4, 1e-1]}, "bs": {"choice": [32, 64]}, "wd": {"quniform": [0, 0.5, 0.1]}},
          {"a": {"grid": [1, 2, 3]}, "b": {"randint": [2, 9]}, "c": {"uniform": [-1, 1]}, "d": 3}]
for i, sp in enumerate(spaces):
    json.dump(sp, open(f"{d}/sweep_space/space{i}.json", "w"))
PY
# A journal as a sweep writes it (a tiny sweep of a shell command, with the built binary).
if [ -x target/release/sweep ]; then
  j=$(mktemp -d)
  printf '%s' '{"x": {"grid": [1, 2]}, "y": {"uniform": [0, 1]}}' >"$j/space.json"
  target/release/sweep -q --space "$j/space.json" --metric m --mode max --time-attr epoch --out-dir "$j/run" \
    -- sh -c 'printf "\173\"m\": %s, \"epoch\": 1\175\n" "$1"' sh '{y}' >/dev/null 2>&1 || true
  cp -n "$j/run/journal.jsonl" "$corpus/sweep_journal/asha.jsonl" 2>/dev/null || true
  rm -rf "$j"
fi
if [[ " ${targets[*]} " == *" convert_network_pkl "* ]]; then
  .venv/bin/python -c "import atheris" 2>/dev/null || .venv/bin/pip install -q atheris
  .venv/bin/python fuzz/python/convert_network_pkl.py --make-seeds "$corpus/convert_network_pkl"
fi
if [[ " ${targets[*]} " != " convert_network_pkl " ]]; then
  cargo +nightly fuzz build -O >/dev/null
fi
for t in "${targets[@]}"; do
  log=$(mktemp)
  rc=0
  if [ "$t" = convert_network_pkl ]; then
    .venv/bin/python fuzz/python/convert_network_pkl.py "$corpus/$t" -max_total_time="$secs" -rss_limit_mb=2048 \
      -max_len=8192 -artifact_prefix=fuzz/artifacts/$t/ >"$log" 2>&1 || rc=$?
  else
    # Fork mode goes on past a crash (a seed may be a known one: the planar tiled TIFF makes the
    # tiff crate assert), so one run reports every distinct crash it finds.
    mkdir -p "fuzz/artifacts/$t"
    before=$(find "fuzz/artifacts/$t" -type f | wc -l)
    cargo +nightly fuzz run -O "$t" "$corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 \
      -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 >"$log" 2>&1 || rc=$?
    runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    found=$(( $(find "fuzz/artifacts/$t" -type f | wc -l) - before ))
    echo "$t: ${runs:-?} runs in ${secs} s, $found new crash/oom/timeout input(s) in fuzz/artifacts/$t (exit $rc)"
    # One line per distinct panic site among the target's artifacts.
    bin=$(ls -d fuzz/target/*/release/"$t" 2>/dev/null | head -1)
    if [ -n "$bin" ]; then
      for a in "fuzz/artifacts/$t"/*; do
        [ -f "$a" ] && { "$bin" "$a" 2>&1 || true; } | grep -m1 -oE 'panicked at [^ ]+' || true
      done | sort | uniq -c | sed 's/^/  /'
    fi
    rm -f "$log"
    continue
  fi
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -1 || true)
  if [ $rc = 0 ]; then echo "$t: ${runs:-?} in ${secs} s, no crash"; else echo "$t: CRASH (exit $rc), see fuzz/artifacts/$t and:"; grep -E 'panicked|ERROR|SUMMARY|Uncaught|Error:' "$log" | head -5; fi
  rm -f "$log"
done
