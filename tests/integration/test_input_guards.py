"""Issue 34's inputs nobody meant, on the lab's PostgreSQL and Slurm: each is refused by the
`arvados_fail_jobs` module and the `arvados-fail-jobs` command (and an options file by
`arvados-recovery-watch`) with a message naming the option and the value, before any change:
the Slurm jobs of the qualifying jobs stay queued, the database dump is byte for byte what it
was, and a program an untrusted options file names never runs.

Before: `before` 2026-12-14 (for 12-04) or 2099-01-01 failed every healthy job; `--before ""`
meant no threshold; 9999-12-31T23:59:59-05:00 raised OverflowError; `--db-host db..example.org`
raised UnicodeError from the IDNA codec; `--config-file /dev/zero` read until MemoryError and a
FIFO blocked for ever; a 0666 options file owned by nobody chose the programs run as root;
`--batch-size` took '\u0665' as 5 and 1_000 as 1000; 100,000-character values were echoed whole.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import time
from datetime import timedelta

import pytest
import yaml

from tests.integration import fail_jobs_helpers as h
from tests.integration import module_playbook

NOBODY = pwd.getpwnam("nobody").pw_uid
ACCEPTED = "accepted forms: 'reboot'"
EMPTY_BEFORE = (
    "option before is empty (an unset shell variable?): give 'reboot' or a time, or leave before out "
    "(no --before) to take every Running job"
)
OVERFLOW = "cannot read before='9999-12-31T23:59:59-05:00': out of range (in UTC it is not a date Python can hold); "
HOST = "must be a host name, an IP address or a socket directory (/...): "
FUTURE = re.compile(
    r"option before is later than the database's now\(\), so it would take every Running job, the healthy ones "
    r"started after the reboot too: got '(?P<value>[^']*)' \((?P<iso>[0-9T:.-]+Z)\), the database's now\(\) is "
    r"(?P<now>[0-9T:.-]+Z); nothing was changed\. Give a time in the past \(a typo in the date\?\), or leave "
    r"before out \(no --before\) to take every Running job"
)
NOT_ASCII = "must be a number written with the ASCII digits 0-9 (no underscores, no other digits)"
NOT_DECIMAL = (
    "must be a plain decimal number in an options file (YAML 1.1 reads underscores, 0x, 0b, "
    "a leading 0 and colons as other numbers: 1_000, 0x1F, 017, 1:20)"
)


@pytest.fixture
def queued(fresh_db, lab_env):
    """A cluster whose qualifying jobs, and the one started after the boot, each have a Slurm
    job: {Slurm job id: job uuid}."""
    summary = h.load(fresh_db, running=4, running_after_boot=1, decoys=False)
    submitted = {}
    try:
        for job_uuid in list(summary.running_before_boot) + list(summary.running_after_boot):
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        yield submitted
    finally:
        h.scancel(lab_env, list(submitted))


@pytest.fixture
def files(fresh_db, tmp_path):
    """Settings files as the trial made them: a FIFO, a world-writable config, one of nobody,
    and a symlink to the real config."""
    config = h.write_config(fresh_db, tmp_path)
    fifo = tmp_path / "config-fifo.yml"
    os.mkfifo(fifo)
    writable = tmp_path / "config-0666.yml"
    shutil.copy(config, writable)
    writable.chmod(0o666)
    theirs = tmp_path / "config-nobody.yml"
    shutil.copy(config, theirs)
    theirs.chmod(0o600)
    os.chown(theirs, NOBODY, NOBODY)
    link = tmp_path / "linked" / "config.yml"
    link.parent.mkdir()
    link.symlink_to(config)
    fifo_link = tmp_path / "linked" / "fifo.yml"
    fifo_link.symlink_to(fifo)
    return {
        "config": config,
        "fifo": fifo,
        "writable": writable,
        "theirs": theirs,
        "link": link,
        "fifo_link": fifo_link,
    }


def base_options(files):
    return {"config_file": str(files["config"]), "cancel_slurm_jobs": True, "slurm_timeout": 30, "db_wait": 5}


def future_dates(fresh_db):
    """The trial's typo (ten days on) and 2099-01-01."""
    with fresh_db.connect() as conn:
        now = h.db_now(conn)
    return [(now + timedelta(days=10)).date().isoformat(), "2099-01-01"]


def file_cases(files):
    """(options, the message) for the settings files, the same for the module and the command."""
    return [
        (
            {"config_file": "/dev/zero"},
            "config_file /dev/zero is a character device, not a regular file: refused without reading it",
        ),
        (
            {"config_file": str(files["fifo"])},
            "config_file %s is a FIFO (named pipe), not a regular file: refused without reading it" % files["fifo"],
        ),
        (
            {"config_file": str(files["fifo_link"])},
            "config_file %s is a symlink to '%s', which is a FIFO (named pipe), not a regular file: refused "
            "without reading it" % (files["fifo_link"], files["fifo"]),
        ),
        (
            {"config_file": str(files["writable"])},
            "config_file %s is mode 0666, writable by its group and others: whoever can write it chooses what "
            "this command runs and changes, so it is refused whatever it holds; chmod go-w it" % files["writable"],
        ),
        (
            {"config_file": str(files["theirs"])},
            "config_file %s is owned by uid %d (nobody), neither root nor this command's user (uid 0 (root)): its "
            "owner could change what this command runs and changes, so it is refused whatever it holds; chown it "
            "to root" % (files["theirs"], NOBODY),
        ),
    ]


def value_cases():
    """(options, the message) that need no file."""
    long_label = "a" * 64
    return [
        ({"before": ""}, EMPTY_BEFORE),
        ({"before": "9999-12-31T23:59:59-05:00"}, OVERFLOW + ACCEPTED),
        (
            {"db_host": "db..example.org"},
            "option db_host " + HOST + "an empty label (two dots in a row, or a dot first), got 'db..example.org'",
        ),
        (
            {"db_host": long_label + ".example.org"},
            "option db_host "
            + HOST
            + "a label of 64 characters, more than the 63 of DNS, got '%s...' (76 characters)" % long_label[:60],
        ),
        (
            {"db_host": "dbé.example.org"},
            "option db_host "
            + HOST
            + "it has characters other than ASCII (write an internationalised name in its xn-- form), "
            "got 'dbé.example.org'",
        ),
        (
            {"before": "x" * 100000},
            "cannot read before='%s...' (100000 characters): " % ("x" * 60) + ACCEPTED,
        ),
    ]


def assert_message(message, expected):
    """`expected` exactly; a message ending in the forms' list is compared up to it."""
    if expected.endswith(ACCEPTED):
        assert message.startswith(expected), message
    else:
        assert message == expected


def assert_future(message, value):
    match = FUTURE.fullmatch(message)
    assert match, message
    assert match.group("value") == value
    assert match.group("iso") > match.group("now")


def one_line(completed):
    assert completed.returncode == 1, (completed.stdout, completed.stderr)
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    return lines[0][len("arvados-fail-jobs: ") :]


def test_the_module_refuses_each_input_before_any_change(fresh_db, lab_env, tmp_path, queued, files, lab):
    base = base_options(files)
    futures = future_dates(fresh_db)
    cases = value_cases() + file_cases(files)
    cases.append(
        (
            {"cluster_id": "z" * 100000},
            "cluster_id %s... (100000 characters) is not in config_file %s, which defines: %s"
            % ("z" * 200, files["config"], lab.cluster_id),
        )
    )
    dump_before = h.pg_dump(fresh_db, lab_env)

    tasks = [{"args": dict(base, before=value)} for value in futures]
    tasks += [{"args": dict(base, **given)} for given, _message in cases]
    # In check mode too: the playbooks list the jobs so first.
    tasks += [{"args": dict(base, before=futures[0]), "check": True}]
    results, run = h.run_playbook(lab_env, tmp_path, tasks)

    for value, result in zip(futures, results[: len(futures)], strict=True):
        assert result.get("failed") is True and not result.get("changed")
        assert_future(result["msg"], value)
    for (given, message), result in zip(cases, results[len(futures) : -1], strict=True):
        assert result.get("failed") is True, given
        assert not result.get("changed"), given
        assert_message(result["msg"], message)
    assert_future(results[-1]["msg"], futures[0])
    assert "idna" not in run.stdout + run.stderr
    assert len(run.stdout) < 100000
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_the_module_refuses_a_local_time_under_a_tz_no_zone_has(fresh_db, lab_env, tmp_path, queued, files):
    dump_before = h.pg_dump(fresh_db, lab_env)
    env = dict(lab_env, TZ="UTC+25")

    run = module_playbook.run_playbook(
        h.MODULE, env, tmp_path, [{"args": dict(base_options(files), before="2026-12-01 10:00")}]
    )

    assert run.results[0]["msg"] == (
        "option before='2026-12-01 10:00' refused: this host's local time is UTC-24:00 (TZ=UTC+25), an offset "
        "no zone has (they run from -12:00 to +14:00); write the zone, as 2015-11-24T10:27:17-05:00 or "
        "2015-11-24T15:27:17Z"
    )
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_the_command_refuses_each_input_before_any_change(fresh_db, lab_env, tmp_path, queued, files):
    base = base_options(files)
    dump_before = h.pg_dump(fresh_db, lab_env)
    refused = 0

    for value in future_dates(fresh_db):
        for flags in (["--before", value], ["--before", value, "--check"]):
            assert_future(one_line(h.run_cli(lab_env, tmp_path, base, flags)), value)
            refused += 1
    # The file's before: "" and the flag's are one value.
    assert one_line(h.run_cli(lab_env, tmp_path, dict(base, before=""))) == EMPTY_BEFORE
    for given, message in value_cases() + file_cases(files):
        ((name, value),) = given.items()
        flags = ["--" + name.replace("_", "-"), value]
        assert_message(one_line(h.run_cli(lab_env, tmp_path, base, flags)), message)
        refused += 1
    for text in ("\u0665", "1_000", "\uff15"):
        message = one_line(h.run_cli(lab_env, tmp_path, base, ["--batch-size", text]))
        assert message == "option batch_size %s, got '%s'" % (NOT_ASCII, text)
        refused += 1
    # In the options file, YAML 1.1's numbers too (1_000 unquoted read as 1000 before).
    for text in ("1_000", "0x1F", "017", "1:20"):
        message = one_line(run_cli_yaml(lab_env, tmp_path, base, "batch_size: %s\n" % text))
        assert re.fullmatch(
            r"options file \S+: option batch_size %s, got '%s'" % (re.escape(NOT_DECIMAL), text), message
        )
        refused += 1
    # TZ=UTC+25 moved a local time a day.
    env = dict(lab_env, TZ="UTC+25")
    completed = h.run_cli(env, tmp_path, base, ["--before", "2026-12-01 10:00"])
    assert one_line(completed).startswith(
        "option before='2026-12-01 10:00' refused: this host's local time is UTC-24:00"
    )
    # Under --json the reason is JSON too, not a traceback.
    completed = h.run_cli(lab_env, tmp_path, base, ["--db-host", "db..example.org", "--json"])
    assert completed.returncode == 1 and "Traceback" not in completed.stderr
    assert json.loads(completed.stdout) == {
        "changed": False,
        "failed": True,
        "msg": "option db_host " + HOST + "an empty label (two dots in a row, or a dot first), got 'db..example.org'",
    }

    assert refused == 4 + len(value_cases()) + len(file_cases(files)) + 3 + 4
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def run_cli_yaml(lab_env, tmp_path, options, yaml_text):
    """The command with `options` and `yaml_text` in one YAML options file, as written."""
    path = tmp_path / ("options-%d.yml" % time.monotonic_ns())
    path.write_text(yaml.safe_dump(dict(options)) + yaml_text)
    path.chmod(0o600)
    return run_command(lab_env, h.CLI + ["--options-file", str(path)])


def test_a_symlinked_config_yml_is_followed(fresh_db, lab_env, tmp_path, queued, files):
    """Arvados' loader follows the link: so does the cleanup, which reads the target."""
    completed = h.run_cli(lab_env, tmp_path, dict(base_options(files), config_file=str(files["link"])), ["--check"])
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert "threshold: none (every Running job qualifies)" in lines
    assert "jobs would be failed: %d" % len(queued) in lines, lines
    with fresh_db.connect() as conn:
        now = h.db_now(conn)
    # A threshold one second before the database's now is taken: only the past is checked.
    completed = h.run_cli(
        lab_env, tmp_path, base_options(files), ["--check", "--before", "@%d" % (now.timestamp() - 1)]
    )
    assert completed.returncode == 0, completed.stderr


def run_command(lab_env, argv, timeout=30):
    return subprocess.run(
        argv,
        cwd=str(h.REPO_ROOT),
        env={k: v for k, v in lab_env.items() if k != "JOURNAL_STREAM"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


WATCH = [str(module_playbook.PYTHON), "-m", "plugins.module_utils._reconcile.watch_cli"]


@pytest.mark.parametrize("command", ["fail-jobs", "watch"])
def test_an_options_file_of_nobody_never_runs_what_it_names(fresh_db, lab_env, tmp_path, queued, files, command):
    marker = tmp_path / "evil-ran"
    evil = {}
    for name in ("squeue", "scancel", "scontrol"):
        # What the planted file names: it leaves a mark, then does the real client's work.
        evil[name] = tmp_path / ("evil-" + name)
        evil[name].write_text('#!/bin/sh\ntouch %s\nexec %s "$@"\n' % (marker, shutil.which(name)))
        evil[name].chmod(0o755)
    options = dict(base_options(files), squeue_path=str(evil["squeue"]), scancel_path=str(evil["scancel"]))
    if command == "watch":
        options = {
            "config_file": str(files["config"]),
            "db_wait": 0,
            "settle": 1,
            "metrics_file": str(tmp_path / "arvados_recovery.prom"),
            "dispatcher_unit": "",
            "scontrol_path": str(evil["scontrol"]),
            "squeue_path": str(evil["squeue"]),
        }
    argv = (h.CLI if command == "fail-jobs" else WATCH) + ["--options-file"]
    program = "arvados-fail-jobs" if command == "fail-jobs" else "arvados-recovery-watch"
    dump_before = h.pg_dump(fresh_db, lab_env)

    planted = tmp_path / "planted.yml"
    planted.write_text(json.dumps(options))
    planted.chmod(0o666)
    os.chown(planted, NOBODY, NOBODY)
    completed = run_command(lab_env, argv + [str(planted)])
    assert completed.returncode != 0
    assert (
        "%s: options file %s is mode 0666, writable by its group and others: whoever can write it chooses what "
        "this command runs and changes, so it is refused whatever it holds; chmod go-w it" % (program, planted)
    ) in completed.stderr.splitlines()

    planted.chmod(0o644)
    completed = run_command(lab_env, argv + [str(planted)])
    assert completed.returncode != 0
    assert "options file %s is owned by uid %d (nobody)" % (planted, NOBODY) in completed.stderr

    fifo = tmp_path / "options.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    completed = run_command(lab_env, argv + [str(fifo)])
    assert completed.returncode != 0
    assert (
        "%s: options file %s is a FIFO (named pipe), not a regular file: refused without reading it" % (program, fifo)
    ) in completed.stderr.splitlines()
    assert time.monotonic() - started < 20

    assert not marker.exists()
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before

    # The same file, root's and 0644, is taken: the program it names runs.
    os.chown(planted, 0, 0)
    completed = run_command(lab_env, argv + [str(planted)] + (["--check"] if command == "fail-jobs" else []), 120)
    assert completed.returncode == 0, completed.stderr
    assert marker.exists()


# -- cancel_slurm_jobs auto on a host without squeue ---------------------------------------
# Before: Slurm was skipped ("cancel_slurm_jobs is auto and squeue is not on this host") and
# the jobs were failed, their Slurm jobs running on. Now refused, before any change.
NO_SQUEUE = (
    "cancel_slurm_jobs is auto but squeue is not on this host (PATH, /sbin, /usr/sbin, /usr/local/sbin) "
    "and squeue_path is not set: "
    "the jobs' Slurm jobs cannot be made absent, so no job is failed or requeued (nothing was read "
    "from the database or changed). Set cancel_slurm_jobs to false when this site runs no Slurm or "
    "another step cancels the jobs' Slurm jobs (as recover_after_reboot.yml does on its "
    "slurm_controllers hosts); or install the Slurm clients here, or set squeue_path and scancel_path"
)


def without_slurm_options(files):
    """base_options less cancel_slurm_jobs: its default, auto, is what is refused."""
    options = base_options(files)
    del options["cancel_slurm_jobs"]
    return options


def test_the_module_with_auto_and_no_squeue_refuses_before_any_change(fresh_db, lab_env, tmp_path, queued, files):
    env = h.env_without_slurm(lab_env, tmp_path)
    dump_before = h.pg_dump(fresh_db, lab_env)
    options = without_slurm_options(files)
    tasks = [
        {"args": options},
        {"args": dict(options, cancel_slurm_jobs="auto")},
        {"args": options, "check": True},
    ]

    run = module_playbook.run_playbook(h.MODULE, env, tmp_path, tasks)

    for result in run.results:
        assert result.get("failed") is True and not result.get("changed")
        assert result["msg"] == NO_SQUEUE
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_the_command_with_auto_and_no_squeue_refuses_before_any_change(fresh_db, lab_env, tmp_path, queued, files):
    env = h.env_without_slurm(lab_env, tmp_path)
    dump_before = h.pg_dump(fresh_db, lab_env)
    options = without_slurm_options(files)

    for flags in ([], ["--check"], ["--cancel-slurm-jobs", "auto"]):
        assert one_line(h.run_cli(env, tmp_path, options, flags)) == NO_SQUEUE
    completed = h.run_cli(env, tmp_path, options, ["--json"])
    assert completed.returncode == 1
    assert json.loads(completed.stdout) == {"changed": False, "failed": True, "msg": NO_SQUEUE}

    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_false_on_a_host_without_squeue_fails_the_jobs_without_asking_slurm(fresh_db, lab_env, tmp_path, queued, files):
    """The explicit option says this host asks no Slurm: the jobs are failed, and their Slurm
    jobs are left to another step (here they stay queued, as nothing asked Slurm)."""
    env = h.env_without_slurm(lab_env, tmp_path)
    options = dict(without_slurm_options(files), cancel_slurm_jobs=False)

    completed = h.run_cli(env, tmp_path, options, ["--json"])

    result = h.cli_json(completed)
    assert result["slurm"] == {"skipped": "cancel_slurm_jobs is false"}
    assert result["counts"]["jobs"] == len(queued)
    assert h.squeue_names(lab_env, list(queued)) == queued


# -- numbers in other digits, given to the modules -------------------------------------------
# Before: AnsibleModule read batch_size '\u0665' as 5 and '1_000' as 1000, and the run went on.


def test_the_modules_refuse_numbers_in_other_digits_before_any_change(fresh_db, lab_env, tmp_path, queued, files):
    dump_before = h.pg_dump(fresh_db, lab_env)
    cases = [
        ("batch_size", "\u0665"),
        ("batch_size", "1_000"),
        ("batch_size", "\uff15"),
        ("lock_wait", "\u0665"),
        ("slurm_timeout", "3_0"),
        ("db_port", "\u0665\u0664\u0663\u0662"),
    ]
    tasks = [{"args": dict(base_options(files), **{name: text})} for name, text in cases]
    tasks.append({"args": dict(base_options(files), batch_size="\u0665"), "check": True})
    cancel_tasks = [
        {"args": {"name": sorted(queued.values()), "timeout": text}} for text in ("\u0665", "1_0", "\uff15")
    ]

    results = module_playbook.run_playbook(h.MODULE, lab_env, tmp_path, tasks).results
    cancelled = module_playbook.run_playbook(
        "arvados_ops.recovery.slurm_job_cancel", lab_env, tmp_path, cancel_tasks
    ).results

    for (name, text), result in zip(cases + [("batch_size", "\u0665")], results, strict=True):
        assert result.get("failed") is True and not result.get("changed")
        assert result["msg"] == "option %s %s, got '%s'" % (name, NOT_ASCII, text)
    for text, result in zip(("\u0665", "1_0", "\uff15"), cancelled, strict=True):
        assert result.get("failed") is True and not result.get("changed")
        assert result["msg"] == "option timeout %s, got '%s'" % (NOT_ASCII, text)
    assert h.squeue_names(lab_env, list(queued)) == queued
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_the_watch_refuses_a_yaml_1_1_number_in_its_options_file_and_writes_nothing(fresh_db, lab_env, tmp_path, files):
    metrics = tmp_path / "arvados_recovery.prom"
    options = {"config_file": str(files["config"]), "db_wait": 0, "metrics_file": str(metrics), "dispatcher_unit": ""}
    for name, text in (("settle", "1_0"), ("command_timeout", "0x1F"), ("batch_size", "1:20")):
        path = tmp_path / ("watch-%s.yml" % name)
        path.write_text(yaml.safe_dump(options) + "%s: %s\n" % (name, text))
        path.chmod(0o600)

        completed = run_command(lab_env, WATCH + ["--options-file", str(path)])

        assert completed.returncode == 2, completed.stderr
        assert completed.stderr.splitlines() == [
            "arvados-recovery-watch: options file %s: option %s %s, got '%s'" % (path, name, NOT_DECIMAL, text)
        ]
        assert not metrics.exists()
