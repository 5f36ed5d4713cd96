# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The unit tests mirror plugins/module_utils (issue 35): each source file of a room,
plugins/module_utils/<room>/<name>.py, has its own tests/unit/plugins/module_utils/<room>/
test_<name>.py, where a newcomer looks for the tests of what they change."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
SOURCES = REPO_ROOT / "plugins" / "module_utils"
TESTS = REPO_ROOT / "tests" / "unit" / "plugins" / "module_utils"


def mirrored_test(source: Path) -> Path:
    relative = source.relative_to(SOURCES)
    return TESTS / relative.parent / ("test_%s" % relative.name)


def test_every_module_utils_source_file_has_its_mirrored_test_file():
    sources = sorted(path for path in SOURCES.rglob("*.py") if path.name != "__init__.py")
    assert len(sources) > 50
    missing = [
        "%s (no %s)" % (source.relative_to(REPO_ROOT), mirrored_test(source).relative_to(REPO_ROOT))
        for source in sources
        if not mirrored_test(source).is_file()
    ]
    assert not missing, "source files without their mirrored test file:\n" + "\n".join(missing)
