"""Issue 26's trial inputs on the lab's PostgreSQL and Slurm: each is refused, by the
module and by the `arvados-fail-jobs` command, with a message naming the option and the
bad value, before any change: the Slurm jobs of the qualifying jobs stay queued and the
database dump is byte for byte what it was.

Before issue 26 a NUL or a 3,000-character log_message, or row_lock_wait 3000000, failed
at the first batch's write, after its Slurm jobs were cancelled; 1e308 and 1e300 crashed
(OverflowError) after the Slurm step or after a batch was committed.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.integration import fail_jobs_helpers as h
from tests.integration import module_playbook

NUL_MESSAGE = (
    "option log_message must not contain a NUL character (\\x00), which PostgreSQL text cannot hold, got 'a\\x00b'"
)
LONG_MESSAGE = "option log_message is 3000 bytes of UTF-8, more than the 2500 the logs' summary index takes"

# (options, the module's message): the same values the command is given below.
MODULE_CASES = [
    ({"log_message": "a\u0000b"}, NUL_MESSAGE),
    ({"log_message": "é" * 1500}, LONG_MESSAGE),
    ({"row_lock_wait": 3000000}, "option row_lock_wait must be at most 2147483, got 3000000.0"),
    ({"row_lock_wait": 1e308}, "option row_lock_wait must be at most 2147483, got 1e+308"),
    ({"batch_pause": 1e300}, "option batch_pause must be at most 86400, got 1e+300"),
    ({"batch_size": 1e23}, "option batch_size must be at most 100000, got %d" % int(1e23)),
    ({"slurm_timeout": 1e12}, "option slurm_timeout must be at most 86400, got 1000000000000.0"),
    (
        {"cluster_id": "zz\u001b[2J\nzz"},
        "cluster_id zz\\x1b[2J\\nzz is not in config_file {config}, which defines: {cluster}",
    ),
]


@pytest.fixture
def queued(fresh_db, lab_env):
    """A cluster whose qualifying jobs each have a Slurm job: {Slurm job id: job uuid}."""
    summary = h.load(fresh_db, running=4, running_after_boot=1, decoys=False)
    submitted = {}
    try:
        for job_uuid in summary.running_before_boot:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        yield submitted
    finally:
        h.scancel(lab_env, list(submitted))


def slurm_options(fresh_db, tmp_path):
    return {
        "config_file": str(h.write_config(fresh_db, tmp_path)),
        "cancel_slurm_jobs": True,
        "slurm_timeout": 30,
        "db_wait": 5,
    }


def test_the_module_refuses_each_trial_input_before_any_change(fresh_db, lab_env, tmp_path, queued, lab):
    base = slurm_options(fresh_db, tmp_path)
    dump_before = h.pg_dump(fresh_db, lab_env)

    results, run = h.run_playbook(
        lab_env, tmp_path, [{"args": dict(base, **given)} for given, _message in MODULE_CASES]
    )

    for (given, message), result in zip(MODULE_CASES, results, strict=True):
        assert result.get("failed") is True, given
        assert result["msg"] == message.format(config=base["config_file"], cluster=lab.cluster_id), given
        assert not result.get("changed"), given
    assert "\x1b" not in run.stdout + run.stderr
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_the_reconciliation_refuses_settle_and_query_timeout_past_their_bounds(fresh_db, lab_env, tmp_path):
    base = {"config_file": str(h.write_config(fresh_db, tmp_path)), "db_wait": 5}
    cases = [
        ({"settle": 1e12}, "option settle must be at most 86400, got 1000000000000.0"),
        ({"query_timeout": 1e12}, "option query_timeout must be at most 2147483, got 1000000000000.0"),
    ]

    run = module_playbook.run_playbook(
        "arvados_ops.recovery.arvados_reconcile_info",
        lab_env,
        tmp_path,
        [{"args": dict(base, **given)} for given, _message in cases],
        timeout=120,
    )

    for (given, message), result in zip(cases, run.results, strict=True):
        assert result.get("failed") is True, given
        assert result["msg"] == message
    # Refused at once: before the settle pause, before a query could run for 1e12 s.
    assert run.wall < 60


COMMAND_CASES = [
    ({"log_message": "a\u0000b"}, [], NUL_MESSAGE),
    ({}, ["--message", "é" * 1500], LONG_MESSAGE),
    ({"row_lock_wait": 3000000}, [], "option row_lock_wait must be at most 2147483, got 3000000.0"),
    ({}, ["--row-lock-wait", "1e308"], "option row_lock_wait must be at most 2147483, got 1e+308"),
    ({}, ["--batch-pause", "1e300"], "option batch_pause must be at most 86400, got 1e+300"),
    ({"batch_size": 1e23}, [], "option batch_size must be at most 100000, got %d" % int(1e23)),
    ({"slurm_max_concurrent_scancel": 1000}, [], "option slurm_max_concurrent_scancel must be at most 64, got 1000"),
    # A flag's value is checked as the file's, with the modules' message.
    ({}, ["--batch-size", "1e23"], "option batch_size must be at most 100000, got %d" % int(1e23)),
    ({}, ["--db-port", "many"], "option db_port must be of type int, got 'many'"),
    ({}, ["--slurm-errors", "sometimes"], "option slurm_errors must be one of fail, ignore, got 'sometimes'"),
]


def one_line(completed):
    assert completed.returncode == 1, (completed.stdout, completed.stderr)
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    return lines[0]


def test_the_command_refuses_each_trial_input_before_any_change(fresh_db, lab_env, tmp_path, queued):
    base = slurm_options(fresh_db, tmp_path)
    dump_before = h.pg_dump(fresh_db, lab_env)

    for given, flags, message in COMMAND_CASES:
        completed = h.run_cli(lab_env, tmp_path, dict(base, **given), flags)
        assert one_line(completed) == "arvados-fail-jobs: " + message, (given, flags)

    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_the_command_refuses_a_flag_with_its_no_form(fresh_db, lab_env, tmp_path, queued):
    dump_before = h.pg_dump(fresh_db, lab_env)

    completed = h.run_cli(lab_env, tmp_path, slurm_options(fresh_db, tmp_path), ["--retry", "--no-retry"])

    assert completed.returncode == 2
    assert "argument --no-retry: not allowed with argument --retry" in completed.stderr
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def run_with_options_file(lab_env, options_file):
    return subprocess.run(
        h.CLI + ["--options-file", str(options_file)],
        cwd=str(h.REPO_ROOT),
        env={k: v for k, v in lab_env.items() if k != "JOURNAL_STREAM"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_options_file_is_never_echoed_and_a_readable_password_file_refused(fresh_db, lab_env, tmp_path, queued):
    dump_before = h.pg_dump(fresh_db, lab_env)
    shadow = tmp_path / "shadow"
    shadow.write_text(
        "root:$6$Zq9secretsalt$hashOfTheRootPassword:19000:0:99999:7:::\n"
        "operator:$6$Another$SecondHash:19000:0:99999:7:::\n"
    )
    shadow.chmod(0o640)

    completed = run_with_options_file(lab_env, shadow)

    assert one_line(completed) == (
        "arvados-fail-jobs: options file %s has 2 key(s) that are no option of arvados-fail-jobs "
        "(not shown: it may not be an options file)" % shadow
    )
    for text in ("Zq9secretsalt", "hashOfTheRootPassword", "operator", "SecondHash"):
        assert text not in completed.stdout + completed.stderr

    password = str(fresh_db.connection["password"])
    readable = tmp_path / "readable.json"
    readable.write_text(json.dumps(dict(slurm_options(fresh_db, tmp_path), db_password=password)))
    readable.chmod(0o644)

    completed = run_with_options_file(lab_env, readable)

    assert one_line(completed) == (
        "arvados-fail-jobs: options file %s holds db_password but is mode 0644 (owner uid %d): other users "
        "could read or change it; chmod 0600 (or 0640 with owner root)" % (readable, readable.stat().st_uid)
    )
    assert password not in completed.stdout + completed.stderr
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before

    # The same file kept from other users is taken, and the run does its work.
    readable.chmod(0o600)
    completed = run_with_options_file(lab_env, readable)
    assert completed.returncode == 0, completed.stderr
    assert any(line.startswith("slurm jobs cancelled: %d " % len(queued)) for line in completed.stdout.splitlines())
    assert h.squeue_names(lab_env, list(queued)) == {}
