"""The `arvados-recovery-watch` command as a subprocess on the real lab: PostgreSQL with a
fresh database per test and Slurm with a real stray job. Its .prom file is read back with
prometheus_client's parser and checked by `promtool check metrics`; a failed read (the
database gone) keeps the last good gauges and sets the failure gauge.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.integration import reconcile_helpers as rh
from tests.integration.module_playbook import REPO_ROOT
from tests.unit.plugins.module_utils.prometheus_samples import samples

PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
CLI = [str(PYTHON), "-m", "plugins.module_utils.watch_cli"]
P = "arvados_recovery_"


def free_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_watch(lab_env, tmp_path: Path, options, *flags) -> subprocess.CompletedProcess:
    options_file = tmp_path / "watch.yml"
    options_file.write_text(json.dumps(options))
    options_file.chmod(0o600)
    env = {key: value for key, value in lab_env.items() if key != "JOURNAL_STREAM"}
    return subprocess.run(
        CLI + ["--options-file", str(options_file), *flags],
        cwd=str(REPO_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def promtool_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["promtool", "check", "metrics"],
        input=path.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def options(fresh_db, tmp_path):
    return {
        "config_file": str(fresh_db.write_arvados_config(tmp_path / "config.yml")),
        "cluster_prefix": rh.PREFIX,
        "settle": 1,
        "db_wait": 0,
        "metrics_file": str(tmp_path / "arvados_recovery.prom"),
        # No dispatcher runs on the lab's host: not asked.
        "dispatcher_unit": "",
    }


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed")
def test_a_stray_job_and_an_orphan_become_gauges_and_a_failed_read_keeps_them(
    lab_env, slurm, records, options, tmp_path
):
    stray = records.container("Cancelled", priority=0)
    orphan = records.container("Locked")
    # A live container with its Slurm job: the evidence that Slurm lists the cluster's jobs.
    live = records.container("Running")
    slurm.submit(live, hold=True)
    job_id = slurm.submit(stray, hold=True)
    prom = Path(options["metrics_file"])
    result_file = tmp_path / "result.json"

    completed = run_watch(lab_env, tmp_path, options, "--json", str(result_file))

    assert completed.returncode == 0, completed.stderr
    assert (completed.stdout, completed.stderr) == ("", "")
    result = json.loads(result_file.read_text())
    # Written in pieces (json_stream), the file is still json.dumps' one line, whole.
    assert result_file.read_text() == json.dumps(result, sort_keys=True) + "\n"
    assert result_file.stat().st_mode & 0o777 == 0o644
    assert [entry["uuid"] for entry in result["orphaned_containers"]] == [orphan]
    strays = [entry for entry in result["stray_slurm_jobs"] if entry["name"] == stray]
    assert [entry["job_id"] for entry in strays] == [job_id]
    read = samples(prom.read_text())
    assert read[(P + "orphans", (("kind", "container"), ("state", "Locked")))] == 1
    assert read[(P + "orphans", (("kind", "container"), ("state", "Running")))] == 0
    pending = [entry for entry in result["stray_slurm_jobs"] if entry["kind"] == "container"]
    assert read[(P + "stray_slurm_jobs", (("kind", "container"), ("state", "pending")))] == len(pending) >= 1
    assert read[(P + "watch_read_failed", ())] == 0
    assert read[(P + "dispatcher_lock_held", ())] == 0
    # systemd was not asked, and nodes not listed: no sample rather than a made-up 0.
    assert (P + "dispatcher_unit_active", ()) not in read
    assert 0 < read[(P + "watch_read_duration_seconds", ())] < 60
    text = prom.read_text()
    assert stray not in text and orphan not in text and job_id not in text
    check = promtool_check(prom)
    assert check.returncode == 0, check.stdout + check.stderr

    # The database unreachable: exit 1, the last good gauges kept, the failure set.
    failed = run_watch(
        lab_env, tmp_path, dict(options, config_file="", db_host="127.0.0.1", db_port=free_port(), db_name="arvados")
    )

    assert failed.returncode == 1, failed.stderr
    assert json.loads(failed.stdout)["failed"] is True
    assert "read failed" in failed.stderr
    after = samples(prom.read_text())
    assert after[(P + "watch_read_failed", ())] == 1
    assert after[(P + "orphans", (("kind", "container"), ("state", "Locked")))] == 1
    assert (
        after[(P + "watch_last_success_timestamp_seconds", ())]
        == read[(P + "watch_last_success_timestamp_seconds", ())]
    )
    check = promtool_check(prom)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize(("release", "expected"), [("2.4.4", 0), ("1.4.3", 0), ("2.5.0", 1), (None, None)])
def test_the_release_says_whether_a_dispatch_lock_is_expected(lab_env, options, tmp_path, release, expected):
    # 2.5.0 lib/controller/dblock/dblock.go:24 adds the Dispatch lock (2.4.4's dblock.go has
    # none): on older releases the watch must not call a healthy dispatcher lockless.
    given = dict(options, arvados_version=release) if release else options
    result_file = tmp_path / "result.json"

    completed = run_watch(lab_env, tmp_path, given, "--json", str(result_file))

    assert completed.returncode == 0, completed.stderr
    dispatcher = json.loads(result_file.read_text())["dispatcher"]
    assert dispatcher["lock_held"] is False
    assert dispatcher["lock_expected"] is (None if expected is None else bool(expected))
    read = samples(Path(options["metrics_file"]).read_text())
    assert read.get((P + "dispatcher_lock_expected", ())) == expected
    # The lab has no systemd to ask about the unit: no claim either way.
    assert (P + "dispatcher_running_without_lock", ()) not in read
