#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (not part of CI; issue 7's reliability suite): the
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
[ ${#targets[@]} -gt 0 ] || targets=(decode_crop_resize npz_latent input_line convert_network_pkl)
corpus=fuzz/corpus
mkdir -p "$corpus"/{decode_crop_resize,npz_latent,input_line,convert_network_pkl} fuzz/artifacts/convert_network_pkl
cp -n tests/fixtures/pillow/inputs/* "$corpus/decode_crop_resize/" 2>/dev/null || true
# Every mode and compression Pillow writes, a planar tiled TIFF, and damaged variants of each;
# and the conformance corpus (issue 19: hand-made JPEG warnings, GIF/BMP/PNG oddities).
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
