#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), rustfmt and clippy gates, build every binary, run
# every test.
#   scripts/test.sh [extra cargo test args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
bash scripts/setup
# shellcheck source=/dev/null
source scripts/env.sh
# The tree stays rustfmt-formatted and clippy-clean: both gate the suite, before the long build.
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -q -- -D warnings
# The cross-tool tests drive the built binaries, so build them all first (release: one profile).
cargo test --release --workspace "$@"
# The main job end to end, as README's first command runs it (about 2 minutes here).
if [ -z "${SHARDKIT_SKIP_DEMO:-}" ]; then
  demo=$(mktemp -d)
  bash scripts/demo.sh "$demo" 2>&1 | grep -v -e '^setup:' -e '^#' -e '^  *[0-9]' >&2
  rm -rf "$demo"
fi
echo "scripts/test.sh: finished in $(( $(date +%s) - start )) s" >&2
