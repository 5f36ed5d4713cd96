"""The watch's Prometheus text, read back by Prometheus' own parsers."""

from __future__ import annotations

import os
import platform
import re
import subprocess

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_metrics
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.watch_metrics import (
    node_reason_class,
    reconcile_metrics,
    render,
    slurm_state_class,
    write_failure,
    write_success,
)
from tests.unit.plugins.module_utils.prometheus_samples import build_info_sample, samples

CONTAINER = "zzzzz-dz642-0123456789abcde"
JOB = "zzzzz-8i9sb-0123456789abcde"
UUID = re.compile(r"[a-z0-9]{5}-[a-z0-9]{5}-[a-z0-9]{15}")


def stray(kind, state, name=CONTAINER):
    return {"job_id": "42", "name": name, "state": state, "kind": kind, "reason": "container is Cancelled: " + name}


RESULT = {
    "stray_slurm_jobs": [stray("container", "RUNNING"), stray("container", "PENDING"), stray("job", "SUSPENDED", JOB)],
    "missing_from_database": [stray("container", "COMPLETING")],
    "orphaned_jobs": [{"uuid": JOB, "state": "Running", "reason": "no Slurm job named " + JOB}],
    "orphaned_containers": [
        {"uuid": CONTAINER, "state": "Locked", "locked_by_uuid": "zzzzz-gj3su-000000000000000"},
        {"uuid": CONTAINER, "state": "Running", "locked_by_uuid": "zzzzz-gj3su-000000000000000"},
        {"uuid": CONTAINER, "state": "Running", "locked_by_uuid": "zzzzz-gj3su-000000000000000"},
    ],
    "jobs_awaiting_retry": [{"uuid": JOB}],
    "orphans_withheld": {"jobs": None, "containers": "Slurm shows no Slurm job for any of the 3 live containers"},
    "ending_slurm_jobs": 2,
    "dispatcher": {"lock_key": 10005, "lock_held": False, "holders": []},
}
NODES = [
    {"state": "down", "reason": "Node unexpectedly rebooted [slurm@2026-12-03T10:00:00]"},
    {"state": "drain", "reason": "disk replaced"},
]


def test_a_read_becomes_gauges_by_kind_and_bounded_state():
    text = render(reconcile_metrics(RESULT, 1.25, 1796300000.0, dispatcher_active=True, nodes=NODES))
    read = samples(text)
    p = "arvados_recovery_"
    assert read[(p + "stray_slurm_jobs", (("kind", "container"), ("state", "running")))] == 1
    assert read[(p + "stray_slurm_jobs", (("kind", "container"), ("state", "pending")))] == 1
    assert read[(p + "stray_slurm_jobs", (("kind", "job"), ("state", "suspended")))] == 1
    assert read[(p + "stray_slurm_jobs", (("kind", "job"), ("state", "running")))] == 0
    assert read[(p + "slurm_jobs_missing_from_database", (("kind", "container"), ("state", "ending")))] == 1
    assert read[(p + "orphans", (("kind", "container"), ("state", "Running")))] == 2
    assert read[(p + "orphans", (("kind", "container"), ("state", "Locked")))] == 1
    assert read[(p + "orphans", (("kind", "job"), ("state", "Running")))] == 1
    assert read[(p + "orphans_withheld", (("kind", "container"),))] == 1
    assert read[(p + "orphans_withheld", (("kind", "job"),))] == 0
    assert read[(p + "jobs_awaiting_retry", ())] == 1
    assert read[(p + "slurm_jobs_ending", ())] == 2
    assert read[(p + "dispatcher_lock_held", ())] == 0
    assert read[(p + "dispatcher_unit_active", ())] == 1
    assert read[(p + "dispatcher_running_without_lock", ())] == 1
    assert read[(p + "slurm_nodes", (("reason", "unexpected_reboot"), ("state", "down")))] == 1
    assert read[(p + "slurm_nodes", (("reason", "other"), ("state", "drain")))] == 1
    assert read[(p + "slurm_nodes", (("reason", "other"), ("state", "down")))] == 0
    assert read[(p + "watch_read_duration_seconds", ())] == 1.25
    assert read[(p + "watch_last_success_timestamp_seconds", ())] == 1796300000.0


def test_a_quiet_cluster_still_has_every_series_at_zero():
    quiet = {"dispatcher": {"lock_held": True}, "orphans_withheld": {"jobs": None, "containers": None}}
    read = samples(render(reconcile_metrics(quiet, 0.5, 1.0, dispatcher_active=True, nodes=[])))
    assert len([key for key in read if key[0] == "arvados_recovery_stray_slurm_jobs"]) == 8
    assert len([key for key in read if key[0] == "arvados_recovery_orphans"]) == 3
    assert len([key for key in read if key[0] == "arvados_recovery_slurm_nodes"]) == 4
    assert read[("arvados_recovery_dispatcher_running_without_lock", ())] == 0


def test_nodes_not_asked_have_no_sample_rather_than_zeros():
    quiet = {"dispatcher": {"lock_held": True}, "orphans_withheld": {"jobs": None, "containers": None}}
    text = render(reconcile_metrics(quiet, 0.5, 1.0, dispatcher_active=True, nodes=None))
    assert "# TYPE arvados_recovery_slurm_nodes gauge" in text
    assert not [key for key in samples(text) if key[0] == "arvados_recovery_slurm_nodes"]


def test_no_uuid_job_id_or_reason_becomes_a_label():
    text = render(reconcile_metrics(RESULT, 1.0, 1.0, dispatcher_active=True, nodes=NODES))
    assert UUID.search(text) is None
    assert "unexpectedly" not in text and "disk replaced" not in text


def test_an_unknown_dispatcher_unit_is_no_sample_rather_than_a_zero():
    read = samples(render(reconcile_metrics(RESULT, 1.0, 1.0, dispatcher_active=None)))
    names = {name for name, _labels in read}
    assert "arvados_recovery_dispatcher_unit_active" not in names
    assert "arvados_recovery_dispatcher_running_without_lock" not in names
    assert "arvados_recovery_dispatcher_lock_held" in names


@pytest.mark.parametrize(
    "state, expected",
    [
        ("PENDING", "pending"),
        ("EXPEDITING", "pending"),
        ("RUNNING", "running"),
        ("CONFIGURING", "running"),
        ("SUSPENDED", "suspended"),
        ("COMPLETING", "ending"),
        ("STAGE_OUT", "ending"),
    ],
)
def test_slurm_states_reduce_to_four_classes(state, expected):
    assert slurm_state_class(state) == expected


def test_only_slurms_own_reboot_reason_counts_as_a_reboot():
    assert node_reason_class("Node unexpectedly rebooted [slurm@2026-12-03T10:00:00]") == "unexpected_reboot"
    assert node_reason_class("Node unexpectedly rebooted") == "unexpected_reboot"
    assert node_reason_class("admin: Node unexpectedly rebooted? checking") == "other"
    assert node_reason_class(None) == "other"


def test_a_failed_read_keeps_the_last_good_gauges_and_says_it_failed(tmp_path):
    path = tmp_path / "arvados_recovery.prom"
    write_success(str(path), reconcile_metrics(RESULT, 1.0, 100.0, dispatcher_active=True), attempted_at=100.0)
    good = samples(path.read_text())
    write_failure(str(path), attempted_at=160.0)
    after = samples(path.read_text())
    assert after[("arvados_recovery_watch_read_failed", ())] == 1
    assert after[("arvados_recovery_watch_last_attempt_timestamp_seconds", ())] == 160.0
    kept = {key: value for key, value in after.items() if "watch_read_failed" not in key[0] and "attempt" not in key[0]}
    assert kept == {
        key: value for key, value in good.items() if "watch_read_failed" not in key[0] and "attempt" not in key[0]
    }
    write_success(str(path), reconcile_metrics(RESULT, 1.0, 200.0, dispatcher_active=True), attempted_at=200.0)
    assert samples(path.read_text())[("arvados_recovery_watch_read_failed", ())] == 0


def test_a_failure_before_any_good_read_writes_the_status_alone(tmp_path):
    path = tmp_path / "arvados_recovery.prom"
    write_failure(str(path), attempted_at=5.0)
    assert set(samples(path.read_text())) == {
        ("arvados_recovery_watch_read_failed", ()),
        ("arvados_recovery_watch_last_attempt_timestamp_seconds", ()),
        build_info_sample(platform.python_version()),
    }


def test_a_write_that_fails_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "arvados_recovery.prom"
    write_success(str(path), reconcile_metrics(RESULT, 1.0, 100.0, dispatcher_active=True), attempted_at=100.0)
    before = path.read_bytes()

    def no_room(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(watch_metrics.os, "fsync", no_room)
    with pytest.raises(OSError):
        write_success(str(path), reconcile_metrics({}, 1.0, 200.0, dispatcher_active=False), attempted_at=200.0)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["arvados_recovery.prom"]


def test_promtool_accepts_the_file_as_prometheus_would_scrape_it(tmp_path):
    text = render(reconcile_metrics(RESULT, 1.25, 1796300000.0, dispatcher_active=True, nodes=NODES))
    # promtool (Debian's prometheus package, installed by scripts/install-deps.sh) lints the
    # exposition format and the naming conventions; it exits 0 only when it has nothing to say.
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


@pytest.mark.parametrize(
    ("expected", "gauge", "without_lock"),
    [(False, 0, 0), (True, 1, 1), (None, None, 1)],
)
def test_before_2_5_no_lock_is_expected_and_none_is_missing(expected, gauge, without_lock):
    # 2.4.4 lib/controller/dblock/dblock.go has no Dispatch lock (2.5.0 dblock.go:24 adds it):
    # a healthy 1.1-2.4 dispatcher runs without it for ever.
    result = dict(RESULT, dispatcher={"lock_key": 10005, "lock_held": False, "lock_expected": expected})
    read = samples(render(reconcile_metrics(result, 1.0, 1.0, dispatcher_active=True)))
    assert read.get(("arvados_recovery_dispatcher_lock_expected", ())) == gauge
    assert read[("arvados_recovery_dispatcher_running_without_lock", ())] == without_lock


def test_a_previous_file_that_is_not_utf8_is_no_state_the_failure_gauge_replaces_it(tmp_path):
    # Issue 34: a non-UTF-8 .prom raised UnicodeDecodeError and no failure gauge was written.
    path = tmp_path / "arvados_recovery.prom"
    path.write_bytes(b"arvados_recovery_orphans 3\n\xff\xfe torn block\n")
    dropped = write_failure(str(path), attempted_at=5.0)
    assert dropped == (
        "option metrics_file %s was not UTF-8 text (byte 27), so its last gauges could not be kept" % path
    )
    assert samples(path.read_text()) == {
        ("arvados_recovery_watch_read_failed", ()): 1,
        ("arvados_recovery_watch_last_attempt_timestamp_seconds", ()): 5.0,
        build_info_sample(platform.python_version()): 1,
    }
    assert write_failure(str(path), attempted_at=6.0) is None


def test_every_write_says_which_collection_version_and_python_wrote_it(tmp_path):
    path = tmp_path / "arvados_recovery.prom"
    info = build_info_sample(platform.python_version())
    write_success(str(path), reconcile_metrics(RESULT, 1.0, 100.0, dispatcher_active=True), attempted_at=100.0)
    assert samples(path.read_text())[info] == 1
    # A failed read rewrites it with the status: one sample, never two.
    write_failure(str(path), attempted_at=160.0)
    assert path.read_text().count("arvados_recovery_build_info{") == 1
    assert samples(path.read_text())[info] == 1
