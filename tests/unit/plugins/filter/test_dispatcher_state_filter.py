# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The filters of recover_after_node_reboot.yml read each host's registered results out of
hostvars; a host without them was not asked. (The decisions themselves:
tests/unit/plugins/module_utils/_dispatcher/test_state.py.)"""

from __future__ import annotations

import importlib

import pytest

try:
    from ansible.module_utils import _internal as module_utils_internal
except ImportError:  # before ansible-core 2.19 there is no controller flag to restore
    module_utils_internal = None


@pytest.fixture(scope="module")
def filters():
    """The filter plugin, imported here rather than at collection: importing it (through
    ansible.errors) marks the process as Ansible's controller, and the module tests that
    run later in the same process would then no longer see their modules' warnings."""
    was_controller = getattr(module_utils_internal, "is_controller", None)
    yield importlib.import_module("ansible_collections.arvados_ops.recovery.plugins.filter.dispatcher_state")
    if was_controller is not None:
        module_utils_internal.is_controller = was_controller


PROBES = {"systemd": "reconcile__systemd", "unit": "reconcile__unit_active", "process": "reconcile__dispatcher_process"}
LOCK_FREE = {"lock_key": 10005, "lock_held": False, "holders": [], "reason": "free"}


def probed(systemd=True, unit="inactive", pids=""):
    return {
        "reconcile__systemd": {"stat": {"exists": systemd}},
        "reconcile__unit_active": {"rc": 0 if unit == "active" else 3, "stdout": unit}
        if systemd
        else {"skipped": True},
        "reconcile__dispatcher_process": {"rc": 0 if pids else 1, "stdout": pids, "stderr": ""},
        "reconcile__v1_process": {"rc": 0 if pids else 1, "stdout": pids, "stderr": ""},
    }


def test_the_filters_are_registered(filters):
    assert set(filters.FilterModule().filters()) == {
        "container_dispatcher_state",
        "container_dispatcher_line",
        "crunch_v1_dispatcher_state",
        "container_slurm_user",
        "crunch_v1_slurm_user",
        "slurm_users",
        "slurm_users_line",
        "slurm_nodes_line",
        "locked_containers_line",
        "with_dispatch_limit",
        "stray_slurm_job_names",
    }


USER_PROBES = {
    "systemd": "reconcile__systemd",
    "unit_user": "reconcile__unit_user",
    "process": "reconcile__user_process",
    "owners": "reconcile__process_owners",
}


def test_the_dispatchers_user_is_read_from_each_hosts_results(filters):
    hostvars = {
        "d1": {
            "reconcile__systemd": {"stat": {"exists": True}},
            "reconcile__unit_user": {"rc": 0, "stdout": "LoadState=loaded\nUser=crunch\n"},
            "reconcile__user_process": {"rc": 1, "stdout": ""},
        },
    }

    decided = filters.container_slurm_user(["d1"], hostvars, USER_PROBES)
    stated = filters.slurm_users(None, ["containers"], decided, {})

    assert decided["user"] == "crunch"
    assert filters.slurm_users_line(stated) == (
        "Slurm jobs touched: those of user crunch (containers: d1: unit crunch-dispatch-slurm: User=crunch)"
    )


def test_a_bad_recover_slurm_user_fails_the_filter(filters):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="recover_slurm_user must be"):
        filters.slurm_users("a b", ["jobs"], {}, {})


def test_each_host_is_read_from_hostvars(filters):
    hostvars = {"d1": probed(), "d2": probed(systemd=False, pids="77")}

    decision = filters.container_dispatcher_state(LOCK_FREE, ["d1", "d2"], hostvars, PROBES)

    assert decision["state"] == "running_without_lock"
    assert decision["up_on"] == ["d2"]
    assert filters.container_dispatcher_line(decision, [], False).startswith("Dispatcher: running_without_lock: ")


def test_a_host_without_results_was_not_asked(filters):
    hostvars = {"d1": probed(), "d2": {"inventory_hostname": "d2"}}

    decision = filters.container_dispatcher_state(LOCK_FREE, ["d1", "d2", "gone"], hostvars, PROBES)

    assert decision["state"] == "unknown"
    assert decision["unknown_on"] == ["d2", "gone"]


def test_every_host_down_starts_on_the_first_with_systemd(filters):
    hostvars = {"d1": probed(systemd=False), "d2": probed()}

    decision = filters.container_dispatcher_state(LOCK_FREE, ["d1", "d2"], hostvars, PROBES)

    assert (decision["state"], decision["start_on"]) == ("not_running", "d2")


def test_crunch_v1_dispatcher_from_hostvars(filters):
    assert filters.crunch_v1_dispatcher_state(["api"], {"api": probed(pids="5")}, "reconcile__v1_process")["state"] == (
        "running"
    )
    assert filters.crunch_v1_dispatcher_state(["api"], {"api": probed()}, "reconcile__v1_process", "auto")["state"] == (
        "stopped"
    )
    assert filters.crunch_v1_dispatcher_state([], {}, "reconcile__v1_process")["state"] == "unknown"


def test_bad_input_is_a_filter_error_naming_it(filters):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="got 'sometimes'"):
        filters.crunch_v1_dispatcher_state([], {}, "reconcile__v1_process", "sometimes")
    with pytest.raises(AnsibleFilterError, match="no lock_held"):
        filters.container_dispatcher_state({}, [], {}, PROBES)


def test_the_nodes_line_takes_a_skipped_resume_for_one_that_did_not_run(filters):
    nodes = [
        {"name": "c1", "state": "down", "reason": "Node unexpectedly rebooted", "reason_is_unexpected_reboot": True}
    ]
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    line = filters.slurm_nodes_line(nodes, skipped)
    assert line == filters.slurm_nodes_line(nodes, {}) == filters.slurm_nodes_line(nodes)
    assert line == (
        "1 Slurm nodes down or drained: c1 down (Node unexpectedly rebooted); none resumed"
        " (recover_resume_nodes=true resumes those down for Slurm's 'Node unexpectedly rebooted'"
        " whose slurmd answers: c1)"
    )
    resumed = filters.slurm_nodes_line(nodes, {"resumed": ["c1"], "refused": []}, True)
    assert resumed.endswith("; would resume: c1")


def test_the_locks_line_reads_the_reconcile_result(filters):
    lock = {"token": "expired", "lock_count": 1, "max_dispatch_attempts": None, "action": "cancel it"}
    containers = [{"uuid": "zzzzz-dz642-aaaaaaaaaaaaaaa", "state": "Locked", "lock": lock}]
    line = filters.locked_containers_line(containers, {"value": None, "source": "unknown: ..."})
    assert line == (
        "1 orphaned Locked containers (MaxDispatchAttempts from unknown: ...):"
        " zzzzz-dz642-aaaaaaaaaaaaaaa: token expired, lock_count 1 of ?: cancel it"
    )


# -- with_dispatch_limit: MaxDispatchAttempts from the installer's arvados_config_file ----


def locked_entry(uuid, token, lock_count, locked_by):
    return {
        "uuid": uuid,
        "state": "Locked",
        "locked_by_uuid": locked_by,
        "lock": {
            "token": token,
            "token_user_uuid": None,
            "token_expires_at": None,
            "lock_count": lock_count,
            "max_dispatch_attempts": None,
            "dispatch_attempts_left": None,
            "action": "as the module said",
        },
    }


def test_the_files_limit_diagnoses_the_locks_again(filters):
    root = "zzzzz-gj3su-000000000000000"
    entries = [
        locked_entry("zzzzz-dz642-000000000000001", "system_root_token", 3, root),
        {"uuid": "zzzzz-dz642-000000000000002", "state": "Running", "locked_by_uuid": root},
    ]
    limit = {"value": 7, "source": "config_file /c.yml, Clusters.zzzzz.Containers.MaxDispatchAttempts"}

    again = filters.with_dispatch_limit(entries, limit, "zzzzz")

    lock = again[0]["lock"]
    assert (lock["max_dispatch_attempts"], lock["dispatch_attempts_left"]) == (7, 4)
    assert "4 dispatch attempts left" in lock["action"]
    assert "lock" not in again[1]
    assert entries[0]["lock"]["action"] == "as the module said"
    line = filters.locked_containers_line(again, limit)
    assert "MaxDispatchAttempts from config_file /c.yml" in line and "lock_count 3 of 7" in line


def test_without_a_value_the_modules_diagnosis_stays(filters):
    entries = [locked_entry("zzzzz-dz642-000000000000001", "expired", 1, "zzzzz-gj3su-0123456789abcde")]
    assert filters.with_dispatch_limit(entries, {}, "zzzzz") is entries


def test_the_stray_names_of_a_kind_are_those_its_entries_name_each_once(filters):
    container, job = "zzzzz-dz642-000000000000001", "zzzzz-8i9sb-000000000000002"
    strays = [
        {"name": container, "kind": "container", "job_id": "7"},
        {"name": job, "kind": "job", "job_id": "8"},
        {"name": container, "kind": "container", "job_id": "9"},
    ]

    assert filters.stray_slurm_job_names(strays, "containers") == [container]
    assert filters.stray_slurm_job_names(strays, "jobs") == [job]
    assert filters.stray_slurm_job_names([], "jobs") == []


def test_a_kind_the_users_are_not_keyed_by_is_refused(filters):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="kind must be one of jobs, containers, got 'job'"):
        filters.stray_slurm_job_names([], "job")
