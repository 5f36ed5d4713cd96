# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One way for the module tests to hand a task's arguments to AnsibleModule, on every
ansible-core the version stage runs (patch_module_args), and to run a module's main with
them (run_main)."""

from __future__ import annotations

import contextlib
import json
from unittest import mock

import pytest
from ansible.module_utils import basic

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core before 2.19 has no testing helper

    @contextlib.contextmanager
    def patch_module_args(args):
        """Hands `args` to AnsibleModule as 2.16 to 2.18 read them: JSON bytes in basic._ANSIBLE_ARGS."""
        with mock.patch.object(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()):
            yield


def run_main(module, args, capsys):
    """The module's result as it printed it; its exit status said failed exactly when it did."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exited:
            module.main()
    output = json.loads(capsys.readouterr().out)
    assert (exited.value.code != 0) == bool(output.get("failed"))
    return output
