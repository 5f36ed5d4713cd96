"""The playbooks of playbooks/, run for real: ansible-playbook, the lab inventory
(playbooks/inventory/lab.yml: this host is arvados_api and slurm_controllers), the lab's
PostgreSQL with a fresh database per test (named through the `recover_db` extra var) and
the lab's Slurm, where each test cancels, by id, the Slurm jobs it submitted. The tests of
`db_sslmode: verify-full` use a PostgreSQL of their own that serves TLS (tls_postgres.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import JOB_INFIX, new_uuid
from lab import datagen
from tests.integration import fail_jobs_helpers as helpers
from tests.integration.conftest import FreshDatabase
from tests.integration.module_playbook import REPO_ROOT
from tests.integration.reconcile_helpers import PREFIX, Records
from tests.integration.slurm_helpers import Slurm
from tests.integration.tls_postgres import SERVER_NAME, TlsPostgres, tls_postgres
from tests.unit.roles.playbook_runs import run_ansible_playbook

PLAYBOOKS = REPO_ROOT / "playbooks"
LAB_INVENTORY = PLAYBOOKS / "inventory" / "lab.yml"
RECOVER = PLAYBOOKS / "recover_after_reboot.yml"
NODE_REBOOT = PLAYBOOKS / "recover_after_node_reboot.yml"
CANCEL = PLAYBOOKS / "cancel_slurm_jobs.yml"

RECAP_RE = re.compile(
    r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
    r"\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)",
    re.MULTILINE,
)


pytestmark = pytest.mark.usefixtures("linked_collection")


class Run:
    def __init__(self, completed: subprocess.CompletedProcess):
        self.completed = completed
        self.stdout = completed.stdout
        recaps = RECAP_RE.findall(completed.stdout)
        assert recaps, "no PLAY RECAP in:\n%s" % completed.stdout[-3000:]
        self.recap = {
            host: dict(
                zip(
                    ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored"),
                    map(int, counts),
                    strict=True,
                )
            )
            for host, *counts in recaps
        }

    @property
    def changed(self) -> int:
        return sum(counts["changed"] for counts in self.recap.values())

    def summary(self) -> dict[str, Any]:
        """The msg list of the last debug task (the playbook's summary)."""
        blocks = re.findall(r'"msg": \[\n(.*?)\n\s*\]', self.stdout, re.DOTALL)
        assert blocks, self.stdout[-3000:]
        return json.loads("[%s]" % blocks[-1])


def ansible_playbook(
    lab_env: Mapping[str, str],
    playbook: Path,
    extra_vars: Mapping[str, Any],
    flags: Sequence[str] = (),
    expect_rc: int = 0,
    timeout: float = 300,
    inventory: Path = LAB_INVENTORY,
) -> Run:
    completed = run_ansible_playbook(
        ["-i", inventory, playbook, "-e", json.dumps(dict(extra_vars)), *flags], env=lab_env, timeout=timeout
    )
    assert completed.returncode == expect_rc, "ansible-playbook exited %d:\n%s\n%s" % (
        completed.returncode,
        completed.stdout[-5000:],
        completed.stderr[-3000:],
    )
    if expect_rc:
        return completed  # type: ignore[return-value]
    return Run(completed)


def recover_vars(fresh_db, tmp_path: Path, summary: datagen.Summary, **extra) -> dict[str, Any]:
    values: dict[str, Any] = {
        "recover_db": {"config_file": str(helpers.write_config(fresh_db, tmp_path))},
        "recover_before": "@%d" % helpers.boot_epoch(summary),
    }
    values.update(extra)
    return values


def submit_for(slurm: Slurm, job_uuids: Sequence[str]) -> dict[str, str]:
    """A held (PENDING, so using no CPU of the shared lab) Slurm job named after each uuid."""
    return {job_uuid: slurm.submit(job_uuid, hold=True) for job_uuid in job_uuids}


def queued_ids(slurm: Slurm, names: Sequence[str]) -> dict[str, str]:
    """Slurm job id -> name, for the queued jobs bearing these names."""
    return {job_id: job.name for job_id, job in slurm.queue(names).items()}


def states(conn, job_uuids: Sequence[str]) -> dict[str, str]:
    jobs = helpers.jobs(conn)
    return {job_uuid: jobs[job_uuid]["state"] for job_uuid in job_uuids}


def stale_cluster(fresh_db, **overrides) -> datagen.Summary:
    values = dict(running=8, running_after_boot=2, running_unstarted=1)
    values.update(overrides)
    return helpers.load(fresh_db, **values)


# -- recover_after_reboot.yml ------------------------------------------------------------


@pytest.mark.cores
def test_recover_fails_exactly_the_stale_jobs_and_cancels_their_slurm_jobs(fresh_db, lab_env, slurm, tmp_path):
    summary = stale_cluster(fresh_db)
    stale = summary.running_before_boot
    exempt = summary.running_after_boot[0]
    slurm_ids = submit_for(slurm, stale[:3] + [exempt])
    with fresh_db.connect() as conn:
        jobs_before = helpers.jobs(conn)
        tokens_before = helpers.tokens(conn)

    run = ansible_playbook(lab_env, RECOVER, recover_vars(fresh_db, tmp_path, summary), flags=["-v"])

    # The database steps never ask Slurm (the API host may have no Slurm tools).
    assert run.stdout.count('"slurm": {"skipped": ') == 2
    with fresh_db.connect() as conn:
        jobs_after = helpers.jobs(conn)
        tokens_after = helpers.tokens(conn)
        logs = helpers.logs(conn)
    assert {u: jobs_after[u]["state"] for u in stale} == {u: "Failed" for u in stale}
    assert helpers.unchanged_except(jobs_before, jobs_after, set(stale)) == []
    assert all(jobs_after[u]["state"] == "Running" for u in summary.running_after_boot + summary.running_unstarted)
    revoked = {summary.job_token_uuids[u] for u in stale}
    assert {u for u in tokens_after if tokens_after[u] != tokens_before[u]} == revoked
    # a `dispatch` and an `update` row per job (1.4.3 crunch_dispatch.rb fail_job, arvados_model.rb log_update),
    # an `update` row per expired token (crunch_dispatch.rb:730)
    assert sorted(row["object_uuid"] for row in logs) == sorted(stale + stale + list(revoked))
    # The stale jobs' Slurm jobs are gone; the exempt job's is still queued.
    assert queued_ids(slurm, list(slurm_ids)) == {slurm_ids[exempt]: exempt}
    lines = run.summary()
    assert "%d jobs failed: " % len(stale) in lines[1]
    assert set(lines[1].split(": ", 1)[1].split(", ")) == set(stale)
    assert lines[2] == "%d API tokens revoked" % len(stale)
    assert lines[3].startswith("3 Slurm jobs cancelled, %d already absent" % (len(stale) - 3))
    assert lines[4].startswith("%d Running jobs exempt" % len(summary.running_after_boot))
    assert lines[5].startswith("1 Running jobs without started_at")
    assert run.recap["localhost"]["failed"] == 0 and run.changed >= 2

    rerun = ansible_playbook(lab_env, RECOVER, recover_vars(fresh_db, tmp_path, summary))

    assert rerun.changed == 0, rerun.stdout
    assert rerun.summary()[1] == "0 jobs failed"
    with fresh_db.connect() as conn:
        assert helpers.jobs(conn) == jobs_after
        assert helpers.tokens(conn) == tokens_after
        assert len(helpers.logs(conn)) == len(logs)
    assert queued_ids(slurm, list(slurm_ids)) == {slurm_ids[exempt]: exempt}


@pytest.mark.parametrize(
    ("slurm_user", "cancelled_as"),
    [
        # recover_after_node_reboot.yml's spellings of the same variable: "*" is every user,
        # a dict gives crunch v1 jobs their own.
        ("*", ["root", "nobody"]),
        ({"jobs": "nobody", "containers": "root"}, ["nobody"]),
    ],
)
def test_recover_slurm_user_is_read_as_the_node_reboot_playbook_reads_it(
    fresh_db, lab_env, slurm, tmp_path, slurm_user, cancelled_as
):
    summary = stale_cluster(fresh_db)
    stale = summary.running_before_boot[:2]
    owners = {slurm.submit(stale[0], hold=True): "root", slurm.submit(stale[1], hold=True, user="nobody"): "nobody"}
    extra = recover_vars(fresh_db, tmp_path, summary, recover_slurm_user=slurm_user)

    # root's Slurm job is left alone when only nobody's are cancelled: its job stays Running
    # and the run fails, saying so (test_a_slurm_user_owning_none_of_the_jobs_...).
    held = "root" not in cancelled_as
    outcome = ansible_playbook(lab_env, RECOVER, extra, expect_rc=2 if held else 0)
    run = Run(outcome) if held else outcome

    left = {owner for job_id, owner in owners.items() if job_id in queued_ids(slurm, stale)}
    assert left == set(owners.values()) - set(cancelled_as)
    assert run.summary()[3].startswith("%d Slurm jobs cancelled" % len(cancelled_as))
    with fresh_db.connect() as conn:
        assert states(conn, stale) == {stale[0]: "Running" if held else "Failed", stale[1]: "Failed"}


def test_a_slurm_user_owning_none_of_the_jobs_leaves_them_running_and_fails(fresh_db, lab_env, slurm, tmp_path):
    summary = stale_cluster(fresh_db, running=4, running_after_boot=1, running_unstarted=0)
    stale = summary.running_before_boot
    # The Slurm jobs are root's; the run is told to cancel only crunch's.
    slurm_ids = submit_for(slurm, stale[:2])
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    queue_before = slurm.queue(stale)
    extra = recover_vars(fresh_db, tmp_path, summary, recover_slurm_user="crunch")

    completed = ansible_playbook(lab_env, RECOVER, extra, expect_rc=2)

    assert slurm.queue(stale) == queue_before
    failed = [m for m in re.findall(r'"msg": "((?:[^"\\]|\\.)*)"', completed.stdout) if "left Running" in m]
    assert failed, completed.stdout[-3000:]
    message = json.loads('"%s"' % failed[-1])
    assert message.startswith("2 stale job(s) left Running, not failed or requeued")
    assert "user(s) root, not recover_slurm_user=crunch" in message
    for job_uuid in stale[:2]:
        assert "%s (Slurm job %s of user root, PENDING)" % (job_uuid, slurm_ids[job_uuid]) in message
    # The other stale jobs, with no Slurm job, were failed; those two were left as they were.
    with fresh_db.connect() as conn:
        assert states(conn, stale) == {u: "Running" if u in stale[:2] else "Failed" for u in stale}
    lines = Run(completed).summary()
    assert lines[1].startswith("%d jobs failed" % (len(stale) - 2))
    assert lines[7].startswith("2 jobs left Running, as Slurm jobs of their name belong to another user")

    # All held: nothing at all is changed.
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    completed = ansible_playbook(lab_env, RECOVER, extra, expect_rc=2)
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before
    assert slurm.queue(stale) == queue_before
    assert "2 stale job(s) left Running" in completed.stdout


def test_an_squeue_that_lists_nothing_is_refused_before_any_change(fresh_db, lab_env, slurm, tmp_path):
    summary = stale_cluster(fresh_db, running=3, running_after_boot=1, running_unstarted=0)
    slurm_ids = submit_for(slurm, summary.running_before_boot[:2])
    silent = tmp_path / "silent-squeue"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    for squeue in ("/bin/true", str(silent)):
        extra = recover_vars(fresh_db, tmp_path, summary, recover_squeue_path=squeue)

        completed = ansible_playbook(lab_env, RECOVER, extra, expect_rc=2)

        assert "squeue exited 0 without the line JOBID|STATE|USER|NAME" in completed.stdout
        assert "squeue_path=%s" % squeue in completed.stdout
        assert "Fail or requeue the stale jobs and revoke" not in completed.stdout
        assert helpers.pg_dump(fresh_db, lab_env) == dump_before
        assert sorted(queued_ids(slurm, list(slurm_ids))) == sorted(slurm_ids.values())


def api_only_inventory(directory: Path, slurm_group: bool) -> Path:
    """This machine as the arvados_api host, with no slurm_controllers group or an empty one."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": str(helpers.PYTHON)}
    children: dict[str, Any] = {"arvados_api": {"hosts": {"api-host": local}}}
    if slurm_group:
        children["slurm_controllers"] = {"hosts": {}}
    path = directory / ("api-and-empty-slurm-group.yml" if slurm_group else "api-only.yml")
    path.write_text(json.dumps({"all": {"children": children}}))
    return path


@pytest.mark.parametrize("slurm_group", [False, True], ids=["no-group", "empty-group"])
def test_no_slurm_host_is_refused_unless_the_site_has_no_slurm(fresh_db, lab_env, slurm, tmp_path, slurm_group):
    summary = stale_cluster(fresh_db, running=3, running_after_boot=1, running_unstarted=0)
    stale = summary.running_before_boot
    slurm_ids = submit_for(slurm, stale[:2])
    inventory = api_only_inventory(tmp_path, slurm_group)
    extra = recover_vars(fresh_db, tmp_path, summary)
    dump_before = helpers.pg_dump(fresh_db, lab_env)

    refused = ansible_playbook(lab_env, RECOVER, extra, inventory=inventory, expect_rc=2)

    assert "The inventory names no slurm_controllers host (%s)" % (
        "the group is empty" if slurm_group else "no such group"
    ) in refused.stdout.replace("\n", " ")
    assert "recover_site_has_no_slurm=true" in refused.stdout
    assert "List the stale jobs (a look" not in refused.stdout
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before
    assert sorted(queued_ids(slurm, list(slurm_ids))) == sorted(slurm_ids.values())
    # A value that is not true does not open the way.
    refused = ansible_playbook(
        lab_env, RECOVER, dict(extra, recover_site_has_no_slurm="no"), inventory=inventory, expect_rc=2
    )
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before

    run = ansible_playbook(lab_env, RECOVER, dict(extra, recover_site_has_no_slurm=True), inventory=inventory)

    with fresh_db.connect() as conn:
        assert states(conn, stale) == {u: "Failed" for u in stale}
    assert run.summary()[3].startswith("0 Slurm jobs cancelled, 0 already absent (on no slurm_controllers host)")


def test_check_mode_predicts_and_changes_nothing(fresh_db, lab_env, slurm, tmp_path):
    # The default threshold: the boot time of the arvados_api host, this one.
    boot = datagen.host_boot_time()
    summary = stale_cluster(
        fresh_db,
        boot_time=boot,
        now=datagen.utc_now(),
        running_after_boot=1 if datagen.utc_now() - boot > timedelta(seconds=2) else 0,
    )
    stale = summary.running_before_boot
    slurm_ids = submit_for(slurm, stale[:2])
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    extra = recover_vars(fresh_db, tmp_path, summary)
    del extra["recover_before"]

    run = ansible_playbook(lab_env, RECOVER, extra, flags=["--check"])

    assert helpers.pg_dump(fresh_db, lab_env) == dump_before
    assert sorted(queued_ids(slurm, list(slurm_ids))) == sorted(slurm_ids.values())
    lines = run.summary()
    assert "(reboot (the database's now() less this host's uptime, " in lines[0]
    assert lines[1].startswith("%d jobs would be failed: " % len(stale))
    assert lines[2] == "%d API tokens would be revoked" % len(stale)
    assert lines[3].startswith("2 Slurm jobs would be cancelled")
    assert run.recap["localhost"]["failed"] == 0


def test_retry_requeues_the_stale_jobs(fresh_db, lab_env, slurm, tmp_path):
    summary = stale_cluster(fresh_db)
    stale = summary.running_before_boot
    slurm_ids = submit_for(slurm, stale[:2])

    run = ansible_playbook(lab_env, RECOVER, recover_vars(fresh_db, tmp_path, summary, recover_retry=True))

    with fresh_db.connect() as conn:
        assert states(conn, stale) == {u: "Queued" for u in stale}
        assert states(conn, summary.running_after_boot) == {u: "Running" for u in summary.running_after_boot}
        tasks = helpers.tasks_by_job(conn)
        assert not any(u in tasks for u in stale)
        assert all(helpers.jobs(conn)[u]["started_at"] is None for u in stale)
    assert queued_ids(slurm, list(slurm_ids)) == {}
    assert run.summary()[1].startswith("%d jobs requeued: " % len(stale))

    rerun = ansible_playbook(lab_env, RECOVER, recover_vars(fresh_db, tmp_path, summary, recover_retry=True))
    assert rerun.changed == 0, rerun.stdout


def test_slurm_failure_stops_before_the_database_changes(fresh_db, lab_env, slurm, tmp_path):
    summary = stale_cluster(fresh_db, running=4, running_after_boot=1, running_unstarted=0)
    slurm_ids = submit_for(slurm, summary.running_before_boot[:1])
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    # An squeue that always fails: Slurm cannot be asked.
    extra = recover_vars(fresh_db, tmp_path, summary, recover_squeue_path="/bin/false", recover_slurm_timeout=1)

    completed = ansible_playbook(lab_env, RECOVER, extra, expect_rc=2)

    assert "Fail or requeue the stale jobs" not in completed.stdout
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before
    assert sorted(queued_ids(slurm, list(slurm_ids))) == sorted(slurm_ids.values())


def two_host_inventory(lab_env: Mapping[str, str], directory: Path) -> Path:
    """The API host and the Slurm controller as two hosts (both this machine)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": str(helpers.PYTHON)}
    inventory = {
        "all": {
            "children": {
                "arvados_api": {"hosts": {"api-host": local}},
                "slurm_controllers": {
                    "hosts": {
                        "slurm-host": dict(local, recover_slurm_environment={"SLURM_CONF": lab_env["SLURM_CONF"]})
                    }
                },
            }
        }
    }
    path = directory / "two-hosts.yml"
    path.write_text(json.dumps(inventory))
    return path


def test_api_host_and_slurm_host_apart(fresh_db, lab_env, slurm, tmp_path):
    summary = stale_cluster(fresh_db, running=5, running_after_boot=1, running_unstarted=0)
    stale = summary.running_before_boot
    slurm_ids = submit_for(slurm, stale[:2])
    inventory = two_host_inventory(lab_env, tmp_path)
    extra = recover_vars(fresh_db, tmp_path, summary)
    dump_before = helpers.pg_dump(fresh_db, lab_env)

    # Left out by --limit, the Slurm host cannot cancel: no job is failed.
    refused = ansible_playbook(
        lab_env, RECOVER, extra, inventory=inventory, flags=["--limit", "arvados_api"], expect_rc=2
    )
    assert "The Slurm step did not run on slurm-host" in refused.stdout
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before

    run = ansible_playbook(lab_env, RECOVER, extra, inventory=inventory)

    assert run.recap["slurm-host"]["changed"] == 1
    assert queued_ids(slurm, list(slurm_ids)) == {}
    with fresh_db.connect() as conn:
        assert states(conn, stale) == {u: "Failed" for u in stale}
    assert run.summary()[3].startswith("2 Slurm jobs cancelled, %d already absent (on slurm-host)" % (len(stale) - 2))


def explicit_db(fresh_db, **overrides) -> dict[str, Any]:
    """recover_db naming the database itself (no config file), with its password."""
    connection = fresh_db.connection
    settings = {
        "config_file": "",
        "db_host": connection["host"],
        "db_port": connection["port"],
        "db_name": connection["dbname"],
        "db_user": connection["user"],
        "db_password": connection["password"],
    }
    settings.update(overrides)
    return settings


def without_password_files(lab_env: Mapping[str, str]) -> dict[str, str]:
    """The environment with no pgpass file or PGPASSWORD: only recover_db gives a password."""
    return {k: v for k, v in lab_env.items() if k not in ("PGPASSFILE", "PGPASSWORD")}


def listing_failures(completed: subprocess.CompletedProcess) -> list[str]:
    """The rescue's messages: why the stale jobs could not be listed."""
    reasons = re.findall(r'"msg": ("Listing the stale jobs failed: (?:[^"\\]|\\.)*")', completed.stdout)
    assert reasons, completed.stdout[-3000:]
    return [json.loads(reason) for reason in reasons]


def test_explicit_password_never_shows(fresh_db, lab_env, tmp_path):
    summary = stale_cluster(fresh_db, running=3, running_after_boot=1, running_unstarted=0)
    password = str(fresh_db.connection["password"])
    extra = recover_vars(fresh_db, tmp_path, summary, recover_db=explicit_db(fresh_db))

    run = ansible_playbook(without_password_files(lab_env), RECOVER, extra, flags=["-vvv"])

    assert password not in run.stdout + run.completed.stderr
    with fresh_db.connect() as conn:
        assert states(conn, summary.running_before_boot) == {u: "Failed" for u in summary.running_before_boot}


def test_a_wrong_password_says_authentication_failed_without_the_password(fresh_db, lab_env, tmp_path):
    # The database tasks run with no_log when db_password is given: before issue 26 every
    # failure then read "censored"; the rescue says the module's reason, which masks it.
    summary = stale_cluster(fresh_db, running=3, running_after_boot=1, running_unstarted=0)
    wrong_password = "Wrong-Pw-7c41e9d2b6"
    extra = recover_vars(fresh_db, tmp_path, summary, recover_db=explicit_db(fresh_db, db_password=wrong_password))
    dump_before = helpers.pg_dump(fresh_db, lab_env)

    completed = ansible_playbook(without_password_files(lab_env), RECOVER, extra, flags=["-vvv"], expect_rc=2)

    output = completed.stdout + completed.stderr
    assert wrong_password not in output
    reasons = listing_failures(completed)
    assert "password authentication failed for user" in reasons[0]
    assert "cannot connect to the database" in reasons[0]
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before


def rescue_messages(completed: subprocess.CompletedProcess, prefix: str) -> list[str]:
    reasons = re.findall(r'"msg": ("%s(?:[^"\\]|\\.)*")' % re.escape(prefix), completed.stdout)
    assert reasons, completed.stdout[-3000:]
    return [json.loads(reason) for reason in reasons]


@pytest.mark.parametrize(
    "wrong_for, prefix",
    [
        ("both", "Comparing Slurm's queue with the database failed: "),
        ("api", "Failing or requeueing the orphaned jobs failed: "),
    ],
    ids=["reconcile", "fail-jobs"],
)
def test_the_node_reboot_playbook_says_why_a_wrong_password_failed_without_it(
    fresh_db, lab_env, tmp_path, wrong_for, prefix
):
    # Issue 34, Low 8: the database tasks of recover_after_node_reboot.yml run with no_log
    # when db_password is given, and a wrong one read only "censored"; the rescues say the
    # module's reason, which masks the password, as recover_after_reboot.yml's do.
    with fresh_db.connect() as conn:
        lost_job = Records(conn).job("Running")
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    wrong_password = "Wrong-Pw-3e8a51c0d7"
    extra = {
        "recover_db": explicit_db(fresh_db, db_password=wrong_password),
        "reconcile_settle": 1,
        "reconcile_cluster_prefix": PREFIX,
        "reconcile_orphans": "always",
        "reconcile_crunch_v1_dispatcher": "stopped",
    }
    if wrong_for == "api":
        extra["reconcile_db"] = explicit_db(fresh_db)

    completed = ansible_playbook(without_password_files(lab_env), NODE_REBOOT, extra, flags=["-vvv"], expect_rc=2)

    assert wrong_password not in completed.stdout + completed.stderr
    reason = rescue_messages(completed, prefix)[0]
    assert "cannot connect to the database" in reason and "password authentication failed for user" in reason, reason
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before
    with fresh_db.connect() as conn:
        assert Records(conn).state("jobs", lost_job) == "Running"


@pytest.mark.parametrize(
    "content", ["", "all: [\n", "ungrouped:\n  hosts:\n    somewhere:\n"], ids=["empty", "unparsable", "no-groups"]
)
@pytest.mark.parametrize("playbook", [RECOVER, NODE_REBOOT], ids=["recover_after_reboot", "recover_after_node_reboot"])
def test_an_inventory_without_the_needed_hosts_fails_instead_of_exiting_0(lab_env, tmp_path, playbook, content):
    # Issue 34, Low 9: Ansible only warns about an empty or unparsable inventory and skips
    # every play, so both recovery playbooks exited 0 having done nothing.
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(content)

    completed = ansible_playbook(lab_env, playbook, {}, expect_rc=2, inventory=inventory)

    messages = re.findall(r'"msg": ("The inventory must name a host in (?:[^"\\]|\\.)*")', completed.stdout)
    assert len(messages) == 1, completed.stdout[-3000:]
    message = json.loads(messages[0])
    if playbook == RECOVER:
        assert message.startswith("The inventory must name a host in arvados_api (it names 0)"), message
    else:
        assert message.startswith(
            "The inventory must name a host in each of slurm_controllers and arvados_api (it names 0 and 0)"
        ), message
    assert "Nothing was read or changed" in message
    assert "PLAY [Check that the inventory names the hosts the recovery needs]" in completed.stdout
    # The check is the first play: no other ran.
    assert completed.stdout.count("PLAY [") == 1, completed.stdout


def test_nothing_stale_changes_nothing(fresh_db, lab_env, tmp_path):
    summary = stale_cluster(fresh_db, running=2, running_after_boot=2, running_unstarted=0)
    dump_before = helpers.pg_dump(fresh_db, lab_env)

    run = ansible_playbook(lab_env, RECOVER, recover_vars(fresh_db, tmp_path, summary))

    assert run.changed == 0
    assert run.summary()[1] == "0 jobs failed"
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before


def test_unknown_database_setting_is_refused_without_showing_its_value(fresh_db, lab_env, tmp_path):
    summary = stale_cluster(fresh_db, running=2, running_after_boot=1, running_unstarted=0)
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    extra = recover_vars(fresh_db, tmp_path, summary)
    # A misspelt password: the module refuses it, and -vvv would show a module's arguments.
    extra["recover_db"]["db_passwd"] = "Typo-Pw-40c2e8a1"

    completed = ansible_playbook(lab_env, RECOVER, extra, flags=["-vvv"], expect_rc=2)

    refusal = listing_failures(completed)[0]
    assert "Unsupported parameters for (arvados_ops.recovery.arvados_fail_jobs) module: db_passwd." in refusal
    assert "Typo-Pw-40c2e8a1" not in completed.stdout + completed.stderr
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before


# -- db_ca_cert with db_sslmode verify-full: a PostgreSQL of its own that serves TLS --------


@pytest.fixture(scope="module")
def tls_server(lab) -> Iterator[TlsPostgres]:
    with tls_postgres() as server:
        yield server


@pytest.fixture
def tls_db(tls_server: TlsPostgres) -> Iterator[FreshDatabase]:
    with tls_server.database("lab_test_tls_%s" % uuid.uuid4().hex[:16]) as name:
        yield FreshDatabase(name, tls_server.settings)


def verify_full(tls_db: FreshDatabase, ca_cert, host: str = SERVER_NAME) -> dict[str, Any]:
    """recover_db of a site that verifies its database server: by the name its certificate
    bears, against the site's CA."""
    return explicit_db(tls_db, db_host=host, db_sslmode="verify-full", db_ca_cert=str(ca_cert))


@pytest.mark.own_lab
def test_verify_full_with_the_sites_ca_recovers_the_stale_jobs(tls_server, tls_db, lab_env, tmp_path):
    summary = stale_cluster(tls_db, running=3, running_after_boot=1, running_unstarted=0)
    stale = summary.running_before_boot
    extra = recover_vars(tls_db, tmp_path, summary, recover_db=verify_full(tls_db, tls_server.ca_cert))

    run = ansible_playbook(without_password_files(lab_env), RECOVER, extra)

    with tls_db.connect() as conn:
        assert states(conn, stale) == {u: "Failed" for u in stale}
    assert run.summary()[1].startswith("%d jobs failed: " % len(stale))


@pytest.mark.own_lab
@pytest.mark.parametrize(
    ("wrong_ca", "host", "reason"),
    [
        # Another CA signed the server's certificate.
        (True, SERVER_NAME, "certificate verify failed"),
        # The site's CA signed it, for another name than the one connected to.
        (False, "127.0.0.1", 'does not match host name "127.0.0.1"'),
    ],
    ids=["another CA", "another name"],
)
def test_verify_full_refuses_a_server_it_cannot_verify(tls_server, tls_db, lab_env, tmp_path, wrong_ca, host, reason):
    summary = stale_cluster(tls_db, running=2, running_after_boot=1, running_unstarted=0)
    dump_before = helpers.pg_dump(tls_db, lab_env)
    ca_cert = tls_server.wrong_ca_cert if wrong_ca else tls_server.ca_cert
    # The default db_wait (30 s) retries a database still starting at boot; a certificate
    # that cannot be verified is refused at the first try instead.
    extra = recover_vars(tls_db, tmp_path, summary, recover_db=verify_full(tls_db, ca_cert, host))

    completed = ansible_playbook(without_password_files(lab_env), RECOVER, extra, expect_rc=2)

    assert reason in listing_failures(completed)[0]
    assert "after 1 attempt" in listing_failures(completed)[0]
    assert helpers.pg_dump(tls_db, lab_env) == dump_before


@pytest.mark.own_lab
def test_the_node_reboot_playbook_verifies_the_server_as_well(tls_server, tls_db, lab_env):
    # Both modules of the database group: arvados_reconcile_info on the Slurm controller
    # (recover_db, reconcile_db unset) and arvados_fail_jobs on the API host.
    with tls_db.connect() as conn:
        lost_job = Records(conn).job("Running")
    extra = {
        "recover_db": verify_full(tls_db, tls_server.ca_cert),
        "reconcile_settle": 1,
        "reconcile_cluster_prefix": PREFIX,
        "reconcile_orphans": "always",
        "reconcile_crunch_v1_dispatcher": "stopped",
    }

    run = ansible_playbook(without_password_files(lab_env), NODE_REBOOT, extra)

    assert run.summary()[1].startswith("1 orphaned crunch v1 jobs failed: %s" % lost_job)
    with tls_db.connect() as conn:
        assert Records(conn).state("jobs", lost_job) == "Failed"


# -- cancel_slurm_jobs.yml ---------------------------------------------------------------


@pytest.mark.cores
def test_cancel_slurm_jobs_cancels_the_given_uuids_only(lab_env, slurm):
    names = [new_uuid("zzzzz", JOB_INFIX) for _index in range(3)]
    slurm_ids = submit_for(slurm, names)

    check = ansible_playbook(lab_env, CANCEL, {"cancel_uuids": names[:2]}, flags=["--check"])
    assert check.summary()[0].startswith("2 Slurm jobs would be cancelled")
    assert len(queued_ids(slurm, names)) == 3

    run = ansible_playbook(lab_env, CANCEL, {"cancel_uuids": names[:2]})

    assert queued_ids(slurm, names) == {slurm_ids[names[2]]: names[2]}
    assert run.changed == 1
    assert run.summary()[0].startswith("2 Slurm jobs cancelled: ")

    # The operator's form: a comma-separated string on the command line.
    rerun = ansible_playbook(lab_env, CANCEL, {"cancel_uuids": ",".join(names[:2])})
    assert rerun.changed == 0
    assert rerun.summary()[2].startswith("2 requested names or ids already absent")
    assert queued_ids(slurm, names) == {slurm_ids[names[2]]: names[2]}


def test_cancel_slurm_jobs_needs_uuids(lab_env):
    completed = ansible_playbook(lab_env, CANCEL, {}, expect_rc=2)
    assert "cancel_uuids" in completed.stdout


# -- the demo's before/after numbers (lab/demo.py counts) -------------------------------


def test_demo_counts_follow_a_recovery(fresh_db, lab_env, tmp_path, monkeypatch):
    from lab import demo

    monkeypatch.setenv("SLURM_CONF", lab_env["SLURM_CONF"])
    summary = stale_cluster(fresh_db)
    before = demo.counts(helpers.conninfo(fresh_db), summary.boot_time)
    assert (
        before["running_before_boot"],
        before["running_after_boot"],
        before["running_unstarted"],
        before["dispatch_logs"],
    ) == (len(summary.running_before_boot), len(summary.running_after_boot), 1, 0)

    ansible_playbook(lab_env, RECOVER, recover_vars(fresh_db, tmp_path, summary))

    after = demo.counts(helpers.conninfo(fresh_db), summary.boot_time)
    stale = len(summary.running_before_boot)
    assert after["running_before_boot"] == 0 and after["dispatch_logs"] == stale
    assert after["failed"] == before["failed"] + stale
    assert after["valid_tokens"] == before["valid_tokens"] - stale
    table = demo.format_counts(after, before).splitlines()
    assert table[0].split() == ["before", "after"]
    assert table[2].split()[-2:] == [str(stale), "0"]


def test_reboot_means_the_boot_time_of_the_crunch_v1_dispatcher_host(fresh_db, lab_env, tmp_path):
    summary = stale_cluster(fresh_db)
    extra = recover_vars(fresh_db, tmp_path, summary)
    del extra["recover_before"]
    two_hosts = json.loads(two_host_inventory(lab_env, tmp_path).read_text())
    with_v1_host = json.loads(json.dumps(two_hosts))
    with_v1_host["all"]["children"]["crunch_v1_dispatcher"] = {
        "hosts": {"v1-host": {"ansible_connection": "local", "ansible_python_interpreter": str(helpers.PYTHON)}}
    }
    inventory = tmp_path / "three-hosts.yml"
    inventory.write_text(json.dumps(with_v1_host))
    btime = int(re.search(r"^btime (\d+)$", Path("/proc/stat").read_text(), re.M).group(1))

    from_v1_host = ansible_playbook(lab_env, RECOVER, extra, inventory=inventory, flags=["--check"])
    from_api_host = ansible_playbook(lab_env, RECOVER, extra, inventory=tmp_path / "two-hosts.yml", flags=["--check"])

    # Every host here is this machine: the origin, not the instant, tells them apart.
    boot = datetime.fromtimestamp(btime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert from_v1_host.summary()[0] == (
        "Threshold: jobs started before %s, the boot time of v1-host, which ran the crunch v1 "
        "dispatcher (group crunch_v1_dispatcher) (argument)" % boot
    )
    assert "the boot time of api-host (arvados_api; no crunch_v1_dispatcher host named)" in from_api_host.summary()[0]
    assert from_v1_host.changed == from_api_host.changed
