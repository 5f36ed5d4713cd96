# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Molecule scenarios' connection: containers.podman.podman with pipelining.

containers.podman.podman says it cannot pipeline (its `podman exec` has no `-i`), so every
module task cost four podman processes: `podman mount`, `mkdir` of a temporary directory,
the module's run, its removal; each one conmon and runc, a second or more on a loaded
2-core machine. `podman exec -i` hands the module to the container's Python on stdin: one
process per task. scripts/molecule.sh puts this directory first in
ANSIBLE_CONNECTION_PLUGINS, so the short name `podman` that Molecule's inventory gives
every host resolves here; the scenarios already set ANSIBLE_PIPELINING.
tests/integration/test_roles_check_mode.py runs site.yml over it the same way.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
name: podman
short_description: containers.podman.podman with pipelining, for this collection's Molecule scenarios
description:
  - Runs commands in an existing podman container with C(podman exec -i), so that Ansible can
    pipeline modules; files are still copied with C(podman cp).
author: arvados_ops.recovery contributors
options:
  remote_addr:
    description: The ID of the container.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: User to run commands as inside the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments to pass to the podman command line.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: Executable for podman command.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""


class Connection(PodmanConnection):
    transport = "podman"
    has_pipelining = True

    def _connect(self):
        # No `podman mount`: with pipelining no module file is written, and put_file
        # falls back to `podman cp` without a mount point.
        ConnectionBase._connect(self)  # pylint: disable=protected-access
        self._mount_point = None
        self._connected = True
        return self

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        if in_data is None:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        exec_args = ["exec", "--interactive"]
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
