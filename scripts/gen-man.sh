#!/usr/bin/env bash
# Regenerates man/<tool>.1 from each tool's clap definition (`<tool> --generate man`).
# The pages carry no date, so the output is deterministic; tests/man_pages.rs fails when stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
mkdir -p "$root/man"
for tool in shard-list crop-resize gather-npz generate project-one-gpu all-reduce-check ddp-train sweep pack classify; do
  "$bin/$tool" --generate man >"$root/man/$tool.1.tmp"
  mv "$root/man/$tool.1.tmp" "$root/man/$tool.1"
  echo "man/$tool.1"
done
