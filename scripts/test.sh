#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), rustfmt and clippy gates, build every binary, run
# every test.
#   scripts/test.sh [extra cargo test args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
# Each phase's time on stderr, to see where the suite's time goes.
phase_start=$start
phase() {
  local now
  now=$(date +%s)
  echo "scripts/test.sh: $1 took $(( now - phase_start )) s" >&2
  phase_start=$now
}
# The tree stays rustfmt-formatted and clippy-clean: both gate the suite.
cargo fmt --all -- --check
# `cargo clippy` checks every dependency a second time (160 CPU-s here), so on a fresh target
# (CI's clone) the workspace's crates are linted as they are built instead: SHARDKIT_CLIPPY has
# scripts/rustc-wrapper compile them with clippy-driver, given clippy's `-D warnings`, and a lint
# fails the build. On a target built before, a crate that has not changed is not compiled again,
# so not linted: there `cargo clippy` runs beside the test binaries at the lowest priority
# (scripts/run-tests --beside), in the CPU time they leave idle, failing the suite as a test
# binary would.
beside=()
if [ -d "${CARGO_TARGET_DIR:-target}/release" ]; then
  beside=(--beside "cargo clippy --release --workspace --all-targets -q -- -D warnings")
else
  export SHARDKIT_CLIPPY=1 CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
phase "rustfmt"
bash scripts/setup
phase "set-up (venv and release build)"
# shellcheck source=/dev/null
source scripts/env.sh
# The cross-tool tests drive the built binaries, so build them all first (release: one profile).
# OMP_WAIT_POLICY=passive: libtorch's OpenMP threads (the tests', ddp-train's, Python's) sleep
# between parallel regions instead of spinning. Two tests at a time, each running libtorch on
# every core, spun most of the suite's CPU time away (a ddp-train test subset on 2 cores: 151 s
# and 146 CPU-s spinning, 54 s and 49 CPU-s passive). The thread counts, and so the results'
# bits, are unchanged.
# scripts/run-tests is `cargo test --release --workspace` with as many test binaries at once as
# there are CPUs, the longest first: one after another, the binaries kept 2 cores 158 % busy
# (1,308 s, 2,062 CPU-s), as each waits for its last test or for the processes it drives.
# The tests' Python references (~160 processes, most importing torch and torchvision: ~4 CPU-s
# each on 2 cores) start warm: scripts/python-warm forks each from a server that has imported
# them once. Its servers live in a private directory, ended and removed when this script ends.
warm=$(mktemp -d)
end_warm() {
  local f pid
  for f in "$warm"/*.pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    # Only a server of this directory: a pid left by one that has ended may be another's now.
    if grep -qa -e "--serve" "/proc/$pid/cmdline" 2>/dev/null \
      && grep -qaF "$warm/" "/proc/$pid/cmdline"; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$warm"
}
trap end_warm EXIT
export SHARDKIT_PYTHON_WARM_DIR=$warm
OMP_WAIT_POLICY=passive scripts/run-tests "${beside[@]}" "$@"
phase "tests"
# The main job end to end, as README's first command runs it (about 2 minutes here).
if [ -z "${SHARDKIT_SKIP_DEMO:-}" ]; then
  demo=$(mktemp -d)
  bash scripts/demo.sh "$demo" 2>&1 | grep -v -e '^setup:' -e '^#' -e '^  *[0-9]' >&2
  rm -rf "$demo"
  phase "demo"
fi
echo "scripts/test.sh: finished in $(( $(date +%s) - start )) s" >&2
