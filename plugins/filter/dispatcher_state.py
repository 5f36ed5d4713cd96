# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of recover_after_node_reboot.yml: thin adapters over module_utils/_dispatcher/state.py.

Each takes the host names of a group, ``hostvars`` and the names of the results the
playbook registered on those hosts; a host without them was not asked.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._dispatcher import state as decide
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import locked_containers
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.engine import stray_names_of
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import nodes as slurm_nodes
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import users as whose


def _plain(value):
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _probe(hostvars, host, name):
    """The result registered as `name` on `host`, as a plain dict; None when it never ran there."""
    try:
        host_vars = hostvars[host]
    except KeyError:
        return None
    value = host_vars.get(name) if isinstance(host_vars, Mapping) else None
    return _plain(value) if isinstance(value, Mapping) else None


def container_dispatcher_state(lock, hosts, hostvars, probes, unit="crunch-dispatch-slurm"):
    """The container dispatcher's state (running, running_without_lock, not_running, unknown).

    probes: {'systemd': ..., 'unit': ..., 'process': ...}, each the name of a registered result.
    """
    evidence = [
        (str(host), {kind: _probe(hostvars, host, name) for kind, name in dict(probes).items()}) for host in hosts or []
    ]
    try:
        return decide.container_dispatcher(_plain(lock), evidence, str(unit))
    except ConfigError as error:
        raise AnsibleFilterError(str(error)) from None


def container_dispatcher_line(decision, started_on=(), check_mode=False):
    """The summary's line about the container dispatcher."""
    return decide.container_dispatcher_line(
        _plain(decision), [str(host) for host in started_on or []], bool(check_mode)
    )


def crunch_v1_dispatcher_state(hosts, hostvars, probe, stated=None):
    """Whether crunch-dispatch.rb runs: running, stopped or unknown."""
    try:
        return decide.crunch_v1_dispatcher(
            [(str(host), _probe(hostvars, host, probe)) for host in hosts or []],
            None if stated is None else str(stated),
        )
    except ConfigError as error:
        raise AnsibleFilterError(str(error)) from None


def _host_probes(hosts, hostvars, probes):
    return [
        (str(host), {kind: _probe(hostvars, host, name) for kind, name in dict(probes).items()}) for host in hosts or []
    ]


def container_slurm_user(hosts, hostvars, probes, unit="crunch-dispatch-slurm"):
    """The containers' Slurm user from the arvados_dispatchers hosts.

    probes: {'systemd': ..., 'unit_user': ..., 'process': ..., 'owners': ..., 'config': ...,
    'legacy_config': ..., 'paths': ...}, the names of the results and facts set on each host.
    """
    return whose.container_user(_host_probes(hosts, hostvars, probes), str(unit))


def crunch_v1_slurm_user(hosts, hostvars, probes):
    """The crunch v1 jobs' Slurm user from the crunch_v1_dispatcher hosts' settings files.

    probes: {'application': ..., 'config': ..., 'paths': ...}, the names set on each host.
    """
    return whose.crunch_v1_user(_host_probes(hosts, hostvars, probes))


def slurm_users(stated, kinds, containers, crunch_v1):
    """Per kind, whose Slurm jobs may be stopped, why, and the refusal when it cannot be told."""
    try:
        return whose.slurm_users(_plain(stated), _plain(kinds), _plain(containers), _plain(crunch_v1))
    except ConfigError as error:
        raise AnsibleFilterError(str(error)) from None


def slurm_users_line(decision, check_mode=False):
    """The summary's line: whose Slurm jobs were (or would be) touched."""
    return whose.touched_line(_plain(decision), bool(check_mode))


def slurm_nodes_line(nodes, resume=None, check_mode=False):
    """The summary's line about the Slurm nodes down or drained and which were resumed;
    `resume` is slurm_node_resume's registered result (skipped or undefined: it did not run)."""
    ran = isinstance(resume, Mapping) and not resume.get("skipped") and "resumed" in resume
    return slurm_nodes.nodes_line(_plain(nodes or []), _plain(resume) if ran else None, bool(check_mode))


def with_dispatch_limit(orphaned_containers, limit, prefix):
    """The orphaned containers with each Locked one's lock diagnosed again against `limit`
    ({value, source}: Containers.MaxDispatchAttempts from the installer's
    arvados_config_file, which the module on the host did not read); as they are when
    `limit` has no value. Only lock_count and the token's state, which the module found,
    are read back."""
    limit = _plain(limit) if isinstance(limit, Mapping) else {}
    if limit.get("value") is None:
        return orphaned_containers
    dispatch_limit = locked_containers.DispatchLimit(int(limit["value"]), str(limit.get("source") or ""))
    entries = _plain(orphaned_containers or [])
    tokens = {
        entry["uuid"]: locked_containers.LockToken(
            container_uuid=entry["uuid"],
            lock_count=entry["lock"].get("lock_count"),
            token_found=entry["lock"].get("token") in (locked_containers.ANOTHER, locked_containers.EXPIRED),
            token_user_uuid=entry["lock"].get("token_user_uuid"),
            token_expires_at=entry["lock"].get("token_expires_at"),
            token_expired=entry["lock"].get("token") == locked_containers.EXPIRED,
        )
        for entry in entries
        if entry.get("lock")
    }
    locked_containers.diagnose([entry for entry in entries if entry.get("lock")], tokens, str(prefix), dispatch_limit)
    return entries


def locked_containers_line(orphaned_containers, limit=None):
    """The summary's line about the orphaned Locked containers' locks."""
    return locked_containers.locks_line(_plain(orphaned_containers or []), _plain(limit) if limit else None)


def stray_slurm_job_names(stray_slurm_jobs, kind):
    """The names of the stray Slurm jobs of `kind` ('jobs' or 'containers', as the Slurm
    users are keyed), each once."""
    try:
        return stray_names_of(_plain(stray_slurm_jobs or []), str(kind))
    except ConfigError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {
            "container_dispatcher_state": container_dispatcher_state,
            "container_dispatcher_line": container_dispatcher_line,
            "crunch_v1_dispatcher_state": crunch_v1_dispatcher_state,
            "container_slurm_user": container_slurm_user,
            "crunch_v1_slurm_user": crunch_v1_slurm_user,
            "slurm_users": slurm_users,
            "slurm_users_line": slurm_users_line,
            "slurm_nodes_line": slurm_nodes_line,
            "locked_containers_line": locked_containers_line,
            "with_dispatch_limit": with_dispatch_limit,
            "stray_slurm_job_names": stray_slurm_job_names,
        }
