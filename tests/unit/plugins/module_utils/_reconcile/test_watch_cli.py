# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""watch_cli.py, the arvados-recovery-watch command, with a fake read: flags and options
file, exit codes, the .prom file and the JSON, a failed read keeping the last values."""

from __future__ import annotations

import io
import json
import subprocess

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import command_output, options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_cli
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import runner
from tests.unit.plugins.module_utils.prometheus_samples import samples

CONTAINER = "zzzzz-dz642-0123456789abcde"
STRAY = "zzzzz-dz642-aaaaaaaaaaaaaaa"
P = "arvados_recovery_"


def result(**extra):
    value = {
        "stray_slurm_jobs": [{"job_id": "7", "name": STRAY, "state": "RUNNING", "kind": "container"}],
        "missing_from_database": [],
        "orphaned_jobs": [],
        "orphaned_containers": [{"uuid": CONTAINER, "state": "Locked", "locked_by_uuid": None}],
        "jobs_awaiting_retry": [],
        "orphans_withheld": {"jobs": None, "containers": None},
        "ending_slurm_jobs": 0,
        "dispatcher": {"lock_held": False, "holders": []},
    }
    value.update(extra)
    return value


class FakeRead:
    """run_reconcile's stand-in: checks that it gets only the reconcile's options, then
    answers each call with the next of `answers` (a result, or an error to raise)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.params = []

    def __call__(self, params):
        options.parse(reconcile_run.ALL_OPTIONS, params)
        self.params.append(params)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self, now=1796300000.0):
        self.now = now

    def __call__(self):
        self.now += 1.5
        return self.now


def parse_only(params):
    """reconcile_run.check_params' stand-in where the read is a fake: the table's checks,
    without finding squeue or reading a config.yml."""
    return options.parse(reconcile_run.ALL_OPTIONS, params)


def run(argv, read, unit_active=lambda unit, timeout: True, now=1796300000.0, check=parse_only):
    stdout, stderr = io.StringIO(), io.StringIO()
    reporter = watch_cli.Reporter(stream=stderr, journald=False)
    code = watch_cli.main(
        argv,
        stdout=stdout,
        reporter=reporter,
        check=check,
        read=read,
        unit_active=unit_active,
        clock=Clock(now),
        monotonic=Clock(0.0),
    )
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.fixture
def prom(tmp_path):
    return tmp_path / "arvados_recovery.prom"


def test_a_good_read_writes_the_gauges_and_prints_the_result_with_uuids(prom):
    code, stdout, stderr = run(["--metrics-file", str(prom)], FakeRead(result()))
    assert (code, stderr) == (0, "")
    assert json.loads(stdout)["orphaned_containers"][0]["uuid"] == CONTAINER
    read = samples(prom.read_text())
    assert read[(P + "orphans", (("kind", "container"), ("state", "Locked")))] == 1
    assert read[(P + "stray_slurm_jobs", (("kind", "container"), ("state", "running")))] == 1
    assert read[(P + "dispatcher_unit_active", ())] == 1
    assert read[(P + "dispatcher_running_without_lock", ())] == 1
    assert read[(P + "watch_read_failed", ())] == 0
    # The fake clocks: the read took 1.5 s and ended at 1796300001.5.
    assert read[(P + "watch_read_duration_seconds", ())] == 1.5
    assert read[(P + "watch_last_success_timestamp_seconds", ())] == 1796300001.5
    # No UUID ever becomes a label.
    assert CONTAINER not in prom.read_text() and STRAY not in prom.read_text()


def test_a_failed_read_keeps_the_last_values_sets_the_failure_and_exits_1(prom):
    assert run(["--metrics-file", str(prom)], FakeRead(result()))[0] == 0
    before = samples(prom.read_text())
    code, stdout, stderr = run(
        ["--metrics-file", str(prom)],
        FakeRead(RecoveryError("squeue failed (exit 1): slurmctld down")),
        now=1796300060.0,
    )
    assert code == 1
    assert "slurmctld down" in stderr and "read_failed is 1" in stderr
    assert json.loads(stdout)["failed"] is True
    after = samples(prom.read_text())
    assert after[(P + "watch_read_failed", ())] == 1
    assert after[(P + "watch_last_attempt_timestamp_seconds", ())] == 1796300061.5
    unchanged = {key: value for key, value in after.items() if "watch_read_failed" not in key[0]}
    unchanged.pop((P + "watch_last_attempt_timestamp_seconds", ()))
    assert unchanged == {
        key: value
        for key, value in before.items()
        if key[0] not in (P + "watch_read_failed", P + "watch_last_attempt_timestamp_seconds")
    }


def test_an_unexpected_error_still_sets_the_failure_before_it_propagates(prom):
    with pytest.raises(KeyError):
        run(["--metrics-file", str(prom)], FakeRead(KeyError("a bug")))
    assert samples(prom.read_text())[(P + "watch_read_failed", ())] == 1


def test_a_first_read_that_fails_writes_only_the_failure(prom):
    code = run(["--metrics-file", str(prom)], FakeRead(RecoveryError("database error")))[0]
    assert code == 1
    assert {key[0] for key in samples(prom.read_text())} == {
        P + "watch_read_failed",
        P + "watch_last_attempt_timestamp_seconds",
        P + "build_info",
    }


def test_the_json_goes_to_the_file_named_and_stdout_stays_empty(prom, tmp_path):
    out = tmp_path / "watch.json"
    code, stdout, stderr = run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(result()))
    assert (code, stdout, stderr) == (0, "", "")
    assert json.loads(out.read_text())["stray_slurm_jobs"][0]["name"] == STRAY


def test_the_json_is_one_line_as_json_encodes_it_in_c(prom, tmp_path):
    # Indented, Python's json encodes in Python: seconds for 100,000 orphans (bench/README.md).
    out = tmp_path / "watch.json"
    run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(result()))
    code, stdout, _stderr = run(["--metrics-file", str(prom)], FakeRead(result()))
    assert code == 0
    assert out.read_text() == stdout == json.dumps(json.loads(stdout), sort_keys=True) + "\n"


def big_result():
    """Enough orphans that the JSON comes in several slices (json_stream.SLICE_ITEMS)."""
    jobs = [
        {"uuid": "zzzzz-8i9sb-%015d" % number, "state": "Running", "reason": "ünïcödé ✓ job %d" % number}
        for number in range(2500)
    ]
    return result(orphaned_jobs=jobs, jobs_awaiting_retry=[], checked_at=Unencodable("2026-12-03"))


class Unencodable:
    """Not JSON: json's default=str writes its str()."""

    def __init__(self, text, fails=False):
        self.text = text
        self.fails = fails

    def __str__(self):
        if self.fails:
            raise RuntimeError("cannot say")
        return self.text


def test_the_json_is_json_dumps_text_byte_for_byte_in_the_file_and_on_stdout(prom, tmp_path):
    out = tmp_path / "watch.json"
    expected = json.dumps(big_result(), sort_keys=True, default=str) + "\n"
    assert run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(big_result()))[0] == 0
    code, stdout, _stderr = run(["--metrics-file", str(prom)], FakeRead(big_result()))
    assert code == 0
    assert out.read_bytes() == stdout.encode("utf-8") == expected.encode("utf-8")
    assert out.stat().st_mode & 0o777 == 0o644


def test_a_json_write_failing_midway_keeps_the_old_file_and_no_temporary(prom, tmp_path):
    out = tmp_path / "watch.json"
    run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(result()))
    before = out.read_bytes()
    broken = big_result()
    # Last in sorted order, after the 2,500 orphans are written out.
    broken["zz_last"] = [Unencodable("x", fails=True)]
    with pytest.raises(RuntimeError, match="cannot say"):
        watch_cli.write_json(broken, str(out), None)
    assert out.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == [prom.name, out.name]


def test_a_full_disk_midway_through_the_json_keeps_the_old_file(prom, tmp_path, monkeypatch):
    out = tmp_path / "watch.json"
    run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(result()))
    before = out.read_bytes()
    pieces = []

    def room_for_three(pieces_in):
        for piece in pieces_in:
            if len(pieces) == 3:
                raise OSError(28, "No space left on device")
            pieces.append(piece)
            yield piece

    real = command_output.json_pieces
    monkeypatch.setattr(command_output, "json_pieces", lambda value: room_for_three(real(value)))
    code, stdout, stderr = run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(big_result()))
    assert (code, stdout) == (1, "")
    assert "cannot write %s: No space left on device" % out in stderr
    assert len(pieces) == 3
    assert out.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == [prom.name, out.name]


def test_options_come_from_the_file_and_flags_win(prom, tmp_path):
    options_file = tmp_path / "watch.yml"
    options_file.write_text(
        "metrics_file: %s\nsettle: '3'\nslurm_user: crunch\ndb_password: s3cret\nkinds: [containers]\n"
        "dispatcher_unit: arvados-dispatch-cloud.service\n" % prom
    )
    options_file.chmod(0o600)
    asked = []
    read = FakeRead(result())
    code = run(
        ["--options-file", str(options_file), "--settle", "0.5", "--missing-are-stray"],
        read,
        unit_active=lambda unit, timeout: asked.append((unit, timeout)),
    )[0]
    assert code == 0
    given = read.params[0]
    assert given["settle"] == 0.5 and given["slurm_user"] == "crunch" and given["missing_are_stray"] is True
    assert given["db_password"] == "s3cret" and given["kinds"] == ["containers"]
    assert "metrics_file" not in given and "dispatcher_unit" not in given
    assert asked == [("arvados-dispatch-cloud.service", watch_cli.SYSTEMCTL_TIMEOUT)]
    # Not known (no systemd, no unit): no sample rather than a 0 an alert would take as "stopped".
    assert (P + "dispatcher_unit_active", ()) not in samples(prom.read_text())


@pytest.mark.parametrize(
    "content, mode, message",
    [
        ("db_pasword: x\npassword: hunter2\n", 0o600, "has 2 key(s) that are no option of arvados-recovery-watch"),
        ("db_password: hunter2\n", 0o644, "holds db_password but is mode 0644"),
        ("- hunter2\n", 0o600, "holds a list, not a mapping"),
        ("settle: -1\n", 0o600, "option settle must be at least 0"),
        ("dispatcher_unit: [a]\n", 0o600, "option dispatcher_unit must be of type str"),
    ],
)
def test_an_options_file_that_cannot_be_used_exits_2_writes_nothing_and_quotes_nothing(
    prom, tmp_path, content, mode, message
):
    options_file = tmp_path / "watch.yml"
    options_file.write_text(content)
    options_file.chmod(mode)
    read = FakeRead(result())
    code, stdout, stderr = run(["--options-file", str(options_file), "--metrics-file", str(prom)], read)
    assert (code, stdout, read.params) == (2, "", [])
    assert message in stderr
    assert "hunter2" not in stderr
    assert not prom.exists()


def test_the_password_has_no_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        watch_cli.build_parser().parse_args(["--db-password", "x"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --db-password" in capsys.readouterr().err


def test_every_option_of_the_module_is_an_option_of_the_watch():
    assert set(reconcile_run.ALL_OPTIONS) < set(watch_cli.ALL_OPTIONS)
    assert all(watch_cli.ALL_OPTIONS[name] is option for name, option in reconcile_run.ALL_OPTIONS.items())


def test_nodes_are_counted_when_the_result_lists_them_and_have_no_sample_otherwise(prom):
    nodes = [
        # As _reconcile.run lists them (_slurm/nodes.py classes Slurm's states).
        {"name": "c1", "state": "down", "slurm_state": "DOWN*", "reason": "Node unexpectedly rebooted"},
        {"name": "c2", "state": "drain", "slurm_state": "IDLE+DRAIN", "reason": "disk"},
        {"name": "c3", "state": "drain", "slurm_state": "IDLE+DRAINING", "reason": "Node unexpectedly rebooted"},
    ]
    assert run(["--metrics-file", str(prom)], FakeRead(result(slurm_nodes=nodes)))[0] == 0
    read = samples(prom.read_text())
    assert read[(P + "slurm_nodes", (("reason", "unexpected_reboot"), ("state", "down")))] == 1
    assert read[(P + "slurm_nodes", (("reason", "other"), ("state", "drain")))] == 1
    assert read[(P + "slurm_nodes", (("reason", "unexpected_reboot"), ("state", "drain")))] == 1
    assert run(["--metrics-file", str(prom)], FakeRead(result()))[0] == 0
    assert not [key for key in samples(prom.read_text()) if key[0] == P + "slurm_nodes"]


def test_a_metrics_file_that_cannot_be_written_exits_1_and_still_prints_the_result(tmp_path):
    # Issue 42 item 2: the read succeeded, so its result is printed; the error names the directory.
    missing = tmp_path / "missing"
    code, stdout, stderr = run(["--metrics-file", str(missing / "x.prom")], FakeRead(result()))
    assert code == 1
    assert json.loads(stdout)["orphaned_containers"][0]["uuid"] == CONTAINER
    assert "the read succeeded" in stderr
    assert "cannot write %s: its directory %s does not exist" % (missing / "x.prom", missing) in stderr
    assert not missing.exists()


SYSTEMD_RUNS = "/run/systemd/system"


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """A systemctl found on PATH alone, whatever this host has."""
    program = tmp_path / "systemctl"
    program.write_text("#!/bin/sh\nexit 3\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(runner, "SBIN_DIRECTORIES", ())
    return str(program)


def test_the_unit_is_asked_of_systemd_only_where_it_runs(monkeypatch, systemctl):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 3, stdout="inactive\n", stderr="")

    monkeypatch.setattr(watch_cli.subprocess, "run", fake_run)
    monkeypatch.setattr(watch_cli.os.path, "isdir", lambda path: False)
    assert watch_cli.systemd_unit_active("crunch-dispatch-slurm.service", 1.0) is None
    monkeypatch.setattr(watch_cli.os.path, "isdir", lambda path: path == SYSTEMD_RUNS)
    assert watch_cli.systemd_unit_active("", 1.0) is None
    assert calls == []
    assert watch_cli.systemd_unit_active("crunch-dispatch-slurm.service", 1.0) is False
    assert calls == [[systemctl, "is-active", "--", "crunch-dispatch-slurm.service"]]


def test_without_systemctl_the_unit_is_unknown_and_nothing_runs(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(runner, "SBIN_DIRECTORIES", ())
    monkeypatch.setattr(watch_cli.os.path, "isdir", lambda path: path == SYSTEMD_RUNS)
    monkeypatch.setattr(watch_cli.subprocess, "run", lambda argv, **kwargs: calls.append(argv))

    assert watch_cli.systemd_unit_active("crunch-dispatch-slurm.service", 1.0) is None
    assert calls == []


@pytest.mark.parametrize("word, expected", [("active", True), ("reloading", True), ("failed", False), ("", None)])
def test_systemctl_words_become_active_inactive_or_unknown(monkeypatch, systemctl, word, expected):
    monkeypatch.setattr(watch_cli.os.path, "isdir", lambda path: path == SYSTEMD_RUNS)
    monkeypatch.setattr(
        watch_cli.subprocess, "run", lambda argv, **kwargs: subprocess.CompletedProcess(argv, 0, stdout=word, stderr="")
    )
    assert watch_cli.systemd_unit_active("x.service", 1.0) is expected


def test_a_systemctl_that_hangs_is_unknown(monkeypatch, systemctl):
    def hang(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(watch_cli.os.path, "isdir", lambda path: path == SYSTEMD_RUNS)
    monkeypatch.setattr(watch_cli.subprocess, "run", hang)
    assert watch_cli.systemd_unit_active("x.service", 0.1) is None
