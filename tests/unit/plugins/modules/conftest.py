# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lets the module tests import the module as Ansible does.

Modules import ``ansible_collections.arvados_ops.recovery.plugins...``; a
symlink ``.build/collections/ansible_collections/arvados_ops/recovery`` to
the repository root (the one scripts/link-collection.sh makes) provides it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[4]
COLLECTIONS_DIR = REPO_ROOT / ".build" / "collections"
# The scripted Slurm shared with the engine's tests.
FAKES_DIR = REPO_ROOT / "tests" / "unit" / "plugins" / "module_utils"


def _link_collection() -> None:
    link = COLLECTIONS_DIR / "ansible_collections" / "arvados_ops" / "recovery"
    if link.is_symlink() and link.resolve() == REPO_ROOT:
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(REPO_ROOT, target_is_directory=True)


_link_collection()
for directory in (str(COLLECTIONS_DIR), str(FAKES_DIR)):
    if directory not in sys.path:
        sys.path.insert(0, directory)
