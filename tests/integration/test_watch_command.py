"""The `arvados-recovery-watch` command as a subprocess on the real lab: PostgreSQL with a
fresh database per test and Slurm with a real stray job. Its .prom file is read back with
prometheus_client's parser and checked by `promtool check metrics`; a failed read (the
database gone) keeps the last good gauges and sets the failure gauge.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.watch_cli import DEFAULT_METRICS_FILE
from tests.integration import reconcile_helpers as rh
from tests.integration.module_playbook import REPO_ROOT
from tests.integration.ports import free_port
from tests.unit.plugins.module_utils.prometheus_samples import samples

PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
CLI = [str(PYTHON), "-m", "plugins.module_utils._reconcile.watch_cli"]
P = "arvados_recovery_"


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
    return watch_options(fresh_db, tmp_path)


def watch_options(database, tmp_path: Path) -> dict:
    """The watch's options for `database`, its .prom file in `tmp_path`."""
    return {
        "config_file": str(database.write_arvados_config(tmp_path / "config.yml")),
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
    assert stray not in text and orphan not in text
    # A small job id ("2" on a fresh lab) is in the HELP texts' "2.5": no label value is one.
    assert job_id not in re.findall(r'="([^"]*)"', text)
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


RULES = REPO_ROOT / "prometheus" / "arvados_recovery_rules.yml"


def alert_fires_on(value: float, tmp_path: Path) -> subprocess.CompletedProcess:
    """promtool test rules: ArvadosJobRetryOverdue on a series holding `value`, read after
    read (the watch's timer), for 15 minutes, expected to fire with that value."""
    shown = "%g" % value
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'arvados_recovery_jobs_retry_overdue{instance="w"}', "values": "%sx15" % shown}
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "15m",
                        "alertname": "ArvadosJobRetryOverdue",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "instance": "w"},
                                "exp_annotations": {
                                    "summary": "%s crunch v1 job(s) awaiting a retry crunch-dispatch.rb may have"
                                    " forgotten" % shown,
                                    "description": (
                                        "They are Running with no Slurm job, longer than crunch-dispatch.rb ever"
                                        " waits to retry a job it remembers. If it was restarted (or has no node to"
                                        " give them), fail them with arvados_ops.recovery.arvados_fail_jobs (the"
                                        " watch's JSON output names them: jobs_awaiting_retry, overdue)."
                                    ),
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "overdue_test.yml"
    path.write_text(json.dumps(test))
    return subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed")
def test_an_overdue_retry_becomes_a_gauge_that_fires_the_alert(lab_env, slurm, records, options, tmp_path):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:50: a restarted crunch-dispatch.rb has
    # forgotten the jobs it was to retry; they stay Running for ever.
    witness = records.job("Running")
    slurm.submit(witness, hold=True)
    waiting = records.job("Running", modified_ago=30)
    forgotten = records.job("Running")
    records.modified("jobs", forgotten, 3600)
    result_file = tmp_path / "result.json"
    given = dict(options, kinds=["jobs"], crunch_v1_dispatcher="running")

    completed = run_watch(lab_env, tmp_path, given, "--json", str(result_file))

    assert completed.returncode == 0, completed.stderr
    result = json.loads(result_file.read_text())
    ages = {entry["uuid"]: (entry["overdue"], entry["age_seconds"]) for entry in result["jobs_awaiting_retry"]}
    assert ages[forgotten][0] is True and 3600 <= ages[forgotten][1] < 3660
    assert ages[waiting][0] is False
    read = samples(Path(options["metrics_file"]).read_text())
    assert read[(P + "jobs_retry_overdue", ())] == 1
    assert read[(P + "jobs_awaiting_retry", ())] == 2
    fired = alert_fires_on(read[(P + "jobs_retry_overdue", ())], tmp_path)
    assert fired.returncode == 0, fired.stdout + fired.stderr

    # Once the job is dealt with (here: its row moves), the gauge falls to 0 and the
    # same expectation fails: the alert would not fire.
    records.conn.execute("UPDATE jobs SET state = 'Failed' WHERE uuid = %s", (forgotten,))
    records.conn.commit()
    again = run_watch(lab_env, tmp_path, given)

    assert again.returncode == 0, again.stderr
    after = samples(Path(options["metrics_file"]).read_text())
    assert after[(P + "jobs_retry_overdue", ())] == 0
    silent = alert_fires_on(after[(P + "jobs_retry_overdue", ())], tmp_path)
    assert silent.returncode != 0 and "FAILED" in silent.stdout + silent.stderr


# Issue 34 (High 4, Low 9) and issue 42 (item 2): what the command does with its outputs,
# as a process on the lab, on real paths and file systems.


def lstat_print(path) -> tuple:
    status = os.lstat(path)
    link = os.readlink(path) if os.path.islink(path) else None
    return (status.st_mode, status.st_ino, status.st_rdev, status.st_size, status.st_mtime_ns, link)


@pytest.mark.parametrize(
    "flag, path, said",
    [
        ("--metrics-file", "/dev/null", "option metrics_file /dev/null is a character device"),
        ("--json", "/dev/full", "--json /dev/full is a character device"),
        ("--json", "/dev/null", "--json /dev/null is a character device"),
    ],
)
def test_a_device_as_an_output_exits_2_and_the_device_stays(lab_env, options, tmp_path, flag, path, said):
    before = lstat_print(path)

    completed = run_watch(lab_env, tmp_path, options, flag, path)

    assert completed.returncode == 2, completed.stderr
    assert said in completed.stderr and completed.stdout == ""
    assert lstat_print(path) == before
    assert not Path(options["metrics_file"]).exists()


def test_a_symlinked_json_file_exits_2_and_neither_link_nor_target_changes(lab_env, options, tmp_path):
    target = tmp_path / "elsewhere" / "kept.json"
    target.parent.mkdir()
    target.write_text('{"kept": true}\n')
    link = tmp_path / "result.json"
    link.symlink_to(target)
    before = (lstat_print(link), lstat_print(target))

    completed = run_watch(lab_env, tmp_path, options, "--json", str(link))

    assert completed.returncode == 2, completed.stderr
    assert "--json %s is a symlink to '%s'" % (link, target) in completed.stderr
    assert (lstat_print(link), lstat_print(target)) == before
    assert target.read_text() == '{"kept": true}\n'
    assert not Path(options["metrics_file"]).exists()


@pytest.mark.parametrize(
    "given, said",
    [
        ({"cluster_prefix": "zz"}, "cluster_prefix:"),
        ({"squeue_path": "/nonexistent/squeue"}, "/nonexistent/squeue: cannot be run"),
        (
            {"slurm_user": "a b"},
            "option slurm_user must be a Slurm user name ([A-Za-z0-9_.@-], not starting with @ or -), got 'a b'",
        ),
    ],
)
def test_options_refused_before_the_read_exit_2_and_keep_the_gauges(lab_env, options, tmp_path, given, said):
    assert run_watch(lab_env, tmp_path, options).returncode == 0
    prom = Path(options["metrics_file"])
    before = (lstat_print(prom), prom.read_bytes())

    completed = run_watch(lab_env, tmp_path, dict(options, **given))

    assert completed.returncode == 2, completed.stderr
    assert said in completed.stderr and "read failed" not in completed.stderr
    assert completed.stdout == ""
    assert (lstat_print(prom), prom.read_bytes()) == before


def unreachable(options) -> dict:
    return dict(options, config_file="", db_host="127.0.0.1", db_port=free_port(), db_name="arvados", db_wait=0)


@pytest.fixture
def mounted(tmp_path):
    """mount(8) in a directory under tmp_path, unmounted after the test, most recent first."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    done = []

    def mount(*argv):
        completed = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            pytest.skip("mount %s failed: %s" % (" ".join(argv), completed.stderr.strip()))
        done.append(argv[-1])

    yield mount
    for point in reversed(done):
        subprocess.run(["umount", point], check=False)


def test_a_failed_read_on_a_read_only_directory_says_both_reasons(lab_env, options, tmp_path, mounted):
    gauges = tmp_path / "gauges"
    gauges.mkdir()
    prom = gauges / "arvados_recovery.prom"
    given = dict(options, metrics_file=str(prom))
    assert run_watch(lab_env, tmp_path, given).returncode == 0
    before = (lstat_print(prom), prom.read_bytes())
    # Root ignores a directory's 0555: a read-only bind mount stops it.
    mounted("--bind", str(gauges), str(gauges))
    mounted("-o", "remount,bind,ro", str(gauges))

    failed = run_watch(lab_env, tmp_path, unreachable(given))

    assert failed.returncode == 1, failed.stderr
    assert "read failed" in failed.stderr and "database" in failed.stderr.lower()
    assert "the failure gauge could not be written: cannot write %s: Read-only file system" % prom in failed.stderr
    assert json.loads(failed.stdout)["failed"] is True
    assert (lstat_print(prom), prom.read_bytes()) == before
    assert os.listdir(gauges) == [prom.name]


def test_a_full_directory_keeps_the_read_failure_and_a_good_read_s_result(lab_env, options, tmp_path, mounted):
    gauges = tmp_path / "gauges"
    gauges.mkdir()
    mounted("-t", "tmpfs", "-o", "size=4k", "tmpfs", str(gauges))
    # The one block of the tmpfs taken: nothing more fits.
    (gauges / "filler").write_bytes(b"x" * 4096)
    prom = gauges / "arvados_recovery.prom"
    given = dict(options, metrics_file=str(prom))

    failed = run_watch(lab_env, tmp_path, unreachable(given))

    assert failed.returncode == 1, failed.stderr
    assert "read failed" in failed.stderr and "database" in failed.stderr.lower()
    assert "the failure gauge could not be written: cannot write %s: No space left on device" % prom in failed.stderr
    assert json.loads(failed.stdout)["failed"] is True

    good = run_watch(lab_env, tmp_path, given)

    assert good.returncode == 1, good.stderr
    assert "the read succeeded" in good.stderr and "No space left on device" in good.stderr
    assert "orphaned_containers" in json.loads(good.stdout)
    assert sorted(os.listdir(gauges)) == ["filler"]


@pytest.mark.skipif(
    os.path.isdir(os.path.dirname(DEFAULT_METRICS_FILE)),
    reason="this host has node_exporter's textfile directory: the default would be written",
)
def test_without_the_textfile_directory_the_result_is_printed(lab_env, options, tmp_path):
    given = {key: value for key, value in options.items() if key != "metrics_file"}

    completed = run_watch(lab_env, tmp_path, given)

    assert completed.returncode == 0, completed.stderr
    assert "orphaned_containers" in json.loads(completed.stdout)
    assert "no gauges written: %s does not exist" % os.path.dirname(DEFAULT_METRICS_FILE) in completed.stderr


def test_a_previous_gauge_file_that_is_not_utf8_is_replaced_and_said(lab_env, options, tmp_path):
    """Issue 34: a non-UTF-8 .prom made the failed read's gauge unwritable (UnicodeDecodeError
    told as "cannot write"). Now it is no previous state: replaced by the status gauges,
    which say the read failed, and stderr and the JSON say why the old ones are gone."""
    prom = Path(options["metrics_file"])
    prom.write_bytes(b"arvados_recovery_orphans 3\n\xff\xfe torn\n")

    failed = run_watch(lab_env, tmp_path, unreachable(options))

    assert failed.returncode == 1, failed.stderr
    said = (
        "read failed (option metrics_file %s was not UTF-8 text (byte 27), so its last gauges could not be kept: "
        "taken as no previous state, replaced by the status gauges alone, arvados_recovery_watch_read_failed is 1): "
        % prom
    )
    assert failed.stderr.startswith("arvados-recovery-watch: " + said), failed.stderr
    assert json.loads(failed.stdout)["msg"].startswith(said)
    assert {key[0] for key in samples(prom.read_text())} == {
        P + "watch_read_failed",
        P + "watch_last_attempt_timestamp_seconds",
        P + "build_info",
    }
    assert samples(prom.read_text())[(P + "watch_read_failed", ())] == 1

    # A good read over such a file replaces it too, without a word.
    prom.write_bytes(b"\xff\xfe\n")
    done = run_watch(lab_env, tmp_path, options)
    assert done.returncode == 0, done.stderr
    assert samples(prom.read_text())[(P + "watch_read_failed", ())] == 0
