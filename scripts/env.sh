# Sourced by the scripts: the project venv on PATH and tch told to use its torch (libtorch 2.11.0).
# `source scripts/env.sh` in a shell gives the same environment for hand-run cargo commands.
_shardkit_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export VIRTUAL_ENV="$_shardkit_root/.venv"
export PATH="$VIRTUAL_ENV/bin:$_shardkit_root/target/release:$PATH"
export LIBTORCH_USE_PYTORCH=1
export SHARDKIT_PYTHON="$VIRTUAL_ENV/bin/python"
unset _shardkit_root
