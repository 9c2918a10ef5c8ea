# Sourced by the shell benchmarks that run the built tools in a scratch directory: sets root (the
# checkout), bin (the binaries: SHARDKIT_BIN, else target/release), py (PYTHON, else the venv's),
# shared (SHARDKIT_SHARED, else ../shared beside the checkout), and work, a fresh directory that
# is removed on exit and is the current directory from here on.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${SHARDKIT_BIN:-$root/target/release}
py=${PYTHON:-$root/.venv/bin/python}
shared=${SHARDKIT_SHARED:-$root/../shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
