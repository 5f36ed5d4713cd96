"""One import path for the collection's code in every test and lab process.

A module imported both as `plugins.module_utils._common.errors` and as
`ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors` is two modules:
an error raised by one copy is not caught as the other's `RecoveryError`.
"""

import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
SHORT_IMPORT = re.compile(r"^\s*(from|import)\s+(plugins\b|slurm_fakes\b)", re.MULTILINE)


def test_tests_and_lab_import_the_collection_by_its_ansible_name():
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for folder in ("tests", "lab")
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        if SHORT_IMPORT.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_this_process_holds_one_copy_of_the_engines():
    # Everything the unit tests import is loaded by now in a full run; alone, this test
    # still sees what conftest.py and the lab package imported.
    short_names = sorted(name for name in sys.modules if name == "plugins" or name.startswith("plugins."))
    assert short_names == []
