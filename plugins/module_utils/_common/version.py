# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's version, for what runs without Ansible (``arvados-fail-jobs --version``).

galaxy.yml is the source; tests/unit/plugins/module_utils/_common/test_version.py keeps the two equal.
"""

from __future__ import annotations

COLLECTION = "arvados_ops.recovery"
COLLECTION_VERSION = "1.0.0"
