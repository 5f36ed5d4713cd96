# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the module's documentation promises about the engine stays what the engine does."""

from __future__ import annotations

import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.batch import BULK_SETTINGS_KB
from ansible_collections.arvados_ops.recovery.plugins.modules import arvados_fail_jobs


def test_the_notes_name_the_settings_a_run_raises_and_their_values():
    notes = " ".join(yaml.safe_load(arvados_fail_jobs.DOCUMENTATION)["notes"])
    for name, kilobytes in BULK_SETTINGS_KB:
        assert "C(%s) to %d MB" % (name, kilobytes // 1024) in notes
