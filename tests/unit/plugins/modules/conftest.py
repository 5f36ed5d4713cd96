# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module tests import the modules as Ansible does,
``ansible_collections.arvados_ops.recovery.plugins.modules...``: tests/conftest.py
makes that path (importing ``lab``), the one every test imports the collection by."""
