"""Puts the repository root on sys.path for `lab.*` and `tests.*`; importing `lab` makes
the collection importable as `ansible_collections.arvados_ops.recovery` (the one path the
tests, the modules and the lab import its code by)."""

import sys
from pathlib import Path

REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import lab  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position
