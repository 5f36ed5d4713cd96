"""The local lab: real PostgreSQL and Slurm services for tests, benchmarks and the demo.

The lab and the tests import the collection's code as Ansible does,
``ansible_collections.arvados_ops.recovery.plugins...``, through the symlink
scripts/link-collection.sh makes: one import path, so one process never holds two
copies of a module (two ``RecoveryError`` classes, say) under two names.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS_DIR = REPO_ROOT / ".build" / "collections"


def link_collection() -> None:
    """Makes `ansible_collections.arvados_ops.recovery` this checkout and importable."""
    link = COLLECTIONS_DIR / "ansible_collections" / "arvados_ops" / "recovery"
    if not (link.is_symlink() and link.resolve() == REPO_ROOT):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(REPO_ROOT, target_is_directory=True)
    if str(COLLECTIONS_DIR) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS_DIR))


link_collection()
