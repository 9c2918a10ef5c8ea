"""What the scripts users run import first: they then run with the project's Python environment
(.venv, made by scripts/setup, holding numpy, torch, Pillow...) whichever `python3` started them,
and say what to do when the modules they need are not there."""

import importlib.util
import os
import sys


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
