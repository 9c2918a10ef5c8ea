"""What the scripts users run import first: they then run with the project's Python environment
(.venv, made by scripts/setup, holding numpy, torch, Pillow...) whichever `python3` started them,
and say what to do when the modules they need are not there."""

import importlib.util
import os
import sys
import tempfile


def use(*modules):
    """Re-runs the calling script with .venv/bin/python when it exists and is not the running
    interpreter; then exits with a message naming what is missing if any of `modules` cannot be
    imported."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    venv = os.path.join(root, ".venv")
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(python, [python] + sys.argv)
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(
            f"{os.path.basename(sys.argv[0])}: needs the Python module(s) {', '.join(missing)}, "
            f"which {sys.executable} does not have: run scripts/setup (it makes {venv} with "
            "them), then run this again"
        )


def write_atomic(path, write):
    """Calls `write(tmp)` on a temporary name beside `path`, then renames it to `path`: a reader
    sees the old file or the whole new one, never a part. The file gets 0666 less the umask, as
    any created file (a temporary file's 0600 would stay)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".partial", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
