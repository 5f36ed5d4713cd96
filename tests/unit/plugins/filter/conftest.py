# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lets the filter tests import the filter plugins as Ansible does: the modules' conftest
links the collection and puts it on sys.path."""

from __future__ import annotations

from tests.unit.plugins.modules import conftest as _modules_conftest  # noqa: F401
