# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""findings.py: what a read finds, and the findings two consecutive reads confirm, told once."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import findings

ORPHAN = "zzzzz-dz642-000000000000001"
ORPHAN2 = "zzzzz-dz642-000000000000002"
JOB = "zzzzz-8i9sb-000000000000001"


def result(orphans=(ORPHAN,), **extra):
    value = {
        "cluster_prefix": "zzzzz",
        "database_is_standby": False,
        "orphaned_jobs": [],
        "orphaned_containers": [
            {"uuid": uuid, "state": "Locked", "started_at": None, "reason": "r"} for uuid in orphans
        ],
        "stray_slurm_jobs": [],
        "slurm_nodes": [],
        "jobs_awaiting_retry": [],
        "dispatcher": {"lock_held": True, "lock_expected": True, "reason": "held"},
    }
    value.update(extra)
    return value


class Clock:
    def __init__(self):
        self.now = 1_800_000_000.0

    def __call__(self):
        return self.now


def confirmer(repeat_after=900.0):
    clock = Clock()
    return findings.Confirmer(repeat_after, clock), clock


def read(confirmer_, value, active=None):
    return confirmer_.read(findings.findings_of(value, active), findings.read_context(value, active))


def test_one_read_is_no_finding_and_the_second_confirms_only_what_both_named():
    watch, clock = confirmer()
    assert read(watch, result(orphans=(ORPHAN, ORPHAN2))) == []
    clock.now += 60

    events = read(watch, result(orphans=(ORPHAN,)))

    assert len(events) == 1
    event = events[0][findings.EVENT_KEY]
    assert (event["finding"], event["names"], event["count"]) == ("orphaned_containers", [ORPHAN], 1)
    assert event["details"][ORPHAN]["state"] == "Locked"
    assert (event["first_read_at"], event["read_at"]) == ("2027-01-15T08:00:00Z", "2027-01-15T08:01:00Z")
    assert (event["read_ok"], event["cluster_prefix"], event["database_is_standby"]) == (True, "zzzzz", False)
    assert event["dispatcher"] == {"lock_held": True, "lock_expected": True, "unit_active": None, "known": True}


def test_a_lasting_finding_is_told_once_then_again_after_repeat_after_or_when_it_changes():
    watch, clock = confirmer(repeat_after=300)
    read(watch, result())
    assert len(read(watch, result())) == 1
    clock.now += 120
    assert read(watch, result()) == []
    clock.now += 200
    assert [e[findings.EVENT_KEY]["names"] for e in read(watch, result())] == [[ORPHAN]]
    read(watch, result(orphans=(ORPHAN, ORPHAN2)))
    # ORPHAN2 confirmed by a second read: the finding names more, told at once.
    assert [e[findings.EVENT_KEY]["names"] for e in read(watch, result(orphans=(ORPHAN, ORPHAN2)))] == [
        [ORPHAN, ORPHAN2]
    ]


def test_repeat_after_zero_never_repeats_and_a_cleared_finding_is_told_again_when_it_returns():
    watch, clock = confirmer(repeat_after=0)
    read(watch, result())
    assert len(read(watch, result())) == 1
    clock.now += 10**6
    assert read(watch, result()) == []
    assert read(watch, result(orphans=())) == []
    read(watch, result())
    assert len(read(watch, result())) == 1


def test_a_failed_read_breaks_the_chain_and_two_in_a_row_are_a_finding():
    watch, _clock = confirmer()
    read(watch, result())
    assert watch.failed("database gone", findings.read_context(None, None)) == []
    # The read after the failure is the first of a new chain.
    assert read(watch, result()) == []
    watch.failed("database gone", findings.read_context(None, None))
    events = watch.failed("still gone", findings.read_context(None, None))
    event = events[0][findings.EVENT_KEY]
    assert (event["finding"], event["names"], event["read_ok"], event["dispatcher"]) == (
        "read_failed",
        ["read"],
        False,
        None,
    )
    assert event["details"]["read"]["message"] == "still gone"


def test_the_dispatcher_s_findings_name_the_dispatcher():
    value = result(orphans=(), dispatcher={"lock_held": False, "lock_expected": True, "reason": "no holder"})
    found = findings.findings_of(value, dispatcher_active=False)
    assert found == {
        "dispatcher_without_lock": {"dispatcher": {"reason": "no holder"}},
        "dispatcher_not_running": {"dispatcher": {"unit_active": False}},
    }
    # Before 2.5 no dispatcher takes the lock, and an unknown release cannot say: no finding.
    for expected in (False, None):
        value["dispatcher"]["lock_expected"] = expected
        assert findings.findings_of(value, dispatcher_active=None) == {}
    assert findings.read_context(value, None)["dispatcher"]["known"] is False


def test_strays_are_named_by_slurm_job_id_nodes_only_after_an_unexpected_reboot_retries_only_overdue():
    value = result(
        orphans=(),
        stray_slurm_jobs=[
            {"job_id": "7", "name": ORPHAN, "kind": "container", "state": "RUNNING", "user": "root", "reason": "r"},
            {"job_id": "8", "name": ORPHAN, "kind": "container", "state": "PENDING", "user": "root", "reason": "r"},
        ],
        slurm_nodes=[
            {
                "name": "compute1",
                "state": "down",
                "reason": "Node unexpectedly rebooted",
                "reason_is_unexpected_reboot": True,
            },
            {"name": "compute2", "state": "drain", "reason": "maintenance", "reason_is_unexpected_reboot": False},
        ],
        jobs_awaiting_retry=[
            {"uuid": JOB, "overdue": True, "started_at": None, "reason": "r"},
            {"uuid": "zzzzz-8i9sb-000000000000002", "overdue": False, "started_at": None, "reason": "r"},
        ],
    )
    found = findings.findings_of(value, None)
    assert sorted(found) == ["jobs_retry_overdue", "nodes_down_after_reboot", "stray_slurm_jobs"]
    assert sorted(found["stray_slurm_jobs"]) == ["7", "8"]
    assert list(found["nodes_down_after_reboot"]) == ["compute1"]
    assert list(found["jobs_retry_overdue"]) == [JOB]


def test_events_of_one_read_come_in_the_order_of_kinds():
    watch, _clock = confirmer()
    value = result(orphaned_jobs=[{"uuid": JOB, "state": "Running"}])
    read(watch, value)
    assert [e[findings.EVENT_KEY]["finding"] for e in read(watch, value)] == ["orphaned_jobs", "orphaned_containers"]


def test_options_are_checked_by_name_before_any_read():
    params = findings.check_source_options({"interval": 30, "db_host": "db"})
    assert (params["interval"], params["repeat_after"], params["dispatcher_unit"]) == (30, 900.0, "")
    assert params["db_host"] == "db"
    with pytest.raises(ConfigError, match="interval"):
        findings.check_source_options({"interval": 1})
    with pytest.raises(ConfigError, match="orphans"):
        findings.check_source_options({"orphans": "sometimes"})
    with pytest.raises(ConfigError, match="unknown option.*intervall"):
        findings.check_source_options({"intervall": 30})


def test_an_options_file_gives_the_rest_and_the_rulebook_s_text_arguments_win(tmp_path):
    path = tmp_path / "findings.yml"
    path.write_text("interval: 120\ndb_host: db.example.org\ncrunch_v1_dispatcher: stopped\n")
    params = findings.check_source_options({"options_file": str(path), "interval": "30"})
    assert (params["interval"], params["db_host"], params["crunch_v1_dispatcher"]) == (
        30.0,
        "db.example.org",
        "stopped",
    )
    path.write_text("db_password: secret\n")
    path.chmod(0o644)
    with pytest.raises(RecoveryError, match="findings.yml") as refused:
        findings.check_source_options({"options_file": str(path)})
    assert "secret" not in str(refused.value)
    path.write_text("options_file: /etc/other.yml\n")
    with pytest.raises(RecoveryError, match="options_file"):
        findings.check_source_options({"options_file": str(path)})
