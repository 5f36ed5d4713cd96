"""playbooks/recover_after_node_reboot.yml, run for real: ansible-playbook with the lab
inventory (this host in arvados_api and slurm_controllers; some tests add it to
crunch_v1_dispatcher or arvados_dispatchers), the lab's Slurm (its one node taken down as
a reboot does, and brought back) and a fresh database per test. Each test cancels, by id,
the Slurm jobs it submitted, and kills the stand-in processes it started.

The lab has no systemd: a dispatcher is a process there, and its stand-in is a copy of
sleep(1) under the dispatcher's name (crunch-dispatch-slurm, or script/crunch-dispatch.rb
as runit runs crunch-dispatch.rb).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import (
    CONTAINER_INFIX,
    JOB_INFIX,
    new_uuid,
)
from tests.integration import reconcile_helpers as rh
from tests.integration.fail_jobs_helpers import write_config
from tests.integration.test_playbooks import LAB_INVENTORY, PLAYBOOKS, ansible_playbook

NODE_REBOOT = PLAYBOOKS / "recover_after_node_reboot.yml"
START_TASK = "Start the dispatcher (it then recovers the containers through the API)"
# The summary's line of whose Slurm jobs were touched, of the other users' left alone, and
# of the crunch v1 jobs' Slurm jobs left alone while they end.
TOUCHED, OTHERS, ENDING = 7, 8, 9
NO_DISPATCHER_HOST = (
    "no arvados_dispatchers host in the inventory to ask; root, as Arvados' crunch-dispatch-slurm.service"
    " runs it (no User=, 1.4.3 to 3.2.1)"
)
NO_V1_HOST = (
    "no crunch_v1_dispatcher host in the inventory to ask; crunch, CrunchJobUser's default"
    " (1.4.3 lib/config/config.default.yml)"
)

pytestmark = pytest.mark.usefixtures("linked_collection")


def playbook_vars(fresh_db, tmp_path, **extra):
    values = {
        "recover_db": {"config_file": str(write_config(fresh_db, tmp_path))},
        "reconcile_settle": 1,
        "reconcile_cluster_prefix": rh.PREFIX,
    }
    values.update(extra)
    return values


def lab_inventory(tmp_path: Path, *groups: str) -> Path:
    """The lab's inventory with this host in the given groups too."""
    inventory = yaml.safe_load(LAB_INVENTORY.read_text())
    for group in groups:
        inventory["all"]["children"][group] = {"hosts": {"localhost": None}}
    path = tmp_path / ("lab-%s.yml" % "-".join(groups))
    path.write_text(json.dumps(inventory))
    return path


def crunch_v1_application_yml(tmp_path: Path, user) -> Path:
    """The API server's config/application.yml as 1.4.3 reads it, naming crunch_job_user."""
    path = tmp_path / "application.yml"
    path.write_text(yaml.safe_dump({"common": {"uuid_prefix": rh.PREFIX}, "production": {"crunch_job_user": user}}))
    return path


@contextlib.contextmanager
def stand_in(tmp_path: Path, program: str, user: str | None = None):
    """A process whose command line is `<dir>/<program> 600`: sleep(1) under that name, run
    as `user` (setpriv execs it: the process is the stand-in itself) when given."""
    if user is None:
        path = tmp_path / "stand-in" / program
    else:
        # pytest's tmp_path is root's alone; the other user must be able to run the copy.
        path = Path(tempfile.mkdtemp(prefix="stand-in-")) / program
        os.chmod(path.parent, 0o755)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(shutil.which("sleep"), path)
    gid = None if user is None else pwd.getpwnam(user).pw_gid
    prefix = [] if user is None else ["setpriv", "--reuid=" + user, "--regid=%d" % gid, "--clear-groups"]
    process = subprocess.Popen([*prefix, str(path), "600"])
    try:
        assert rh.wait_for(lambda: Path("/proc/%d/cmdline" % process.pid).read_bytes().startswith(bytes(path)), 30)
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)
        if user is not None:
            shutil.rmtree(path.parent)


def task_outcome(stdout: str, task: str) -> str:
    """The first status line after a task's header ('ok', 'changed', 'skipping', ...)."""
    after = stdout.split("TASK [%s]" % task, 1)
    assert len(after) == 2, "no task %r in:\n%s" % (task, stdout[-3000:])
    return re.search(r"^(ok|changed|skipping|fatal|failed): ", after[1], re.M).group(1)


@pytest.mark.cores
def test_after_a_node_reboot_exactly_the_lost_work_is_recovered(fresh_db, lab_env, slurm, records, tmp_path):
    live_job = records.job("Running")
    killed_job = records.job("Running")
    node_job = records.job("Running")
    complete_job = records.job("Complete")
    live_container = records.container("Running")
    lost_container = records.container("Running")
    cancelled_container = records.container("Cancelled", priority=0)
    queued_container = records.container("Queued")
    missing_container = new_uuid(rh.PREFIX, CONTAINER_INFIX)
    missing_job = new_uuid(rh.PREFIX, JOB_INFIX)
    held = {
        uuid: slurm.submit(uuid, hold=True)
        for uuid in (
            live_job,
            complete_job,
            live_container,
            cancelled_container,
            queued_container,
            missing_container,
            missing_job,
        )
    }
    killed_id = slurm.submit(killed_job)
    node_id = rh.submit_like_the_dispatcher(slurm, node_job)
    slurm.wait_for_state(node_id, "RUNNING")
    slurm.run("scancel", killed_id)
    # No crunch-dispatch.rb runs on the crunch_v1_dispatcher host (this one): the jobs
    # without a Slurm job are nobody's to retry.
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")
    with rh.node_down(slurm):
        assert rh.wait_for(lambda: slurm.final_state(node_id) == "NODE_FAIL", slurm.timing.end_bound), (
            slurm.final_state(node_id)
        )
        # The lab's Slurm jobs are root's: crunch_job_user says so, as on a site that set it.
        application_yml = crunch_v1_application_yml(tmp_path, "root")
        variables = playbook_vars(fresh_db, tmp_path, recover_crunch_v1_application_yml=str(application_yml))

        predicted = ansible_playbook(lab_env, NODE_REBOOT, variables, flags=["--check"], inventory=inventory)
        assert {uuid: records.state("jobs", uuid) for uuid in (killed_job, node_job)} == {
            killed_job: "Running",
            node_job: "Running",
        }
        assert set(held) <= {job.name for job in slurm.queue().values()}

        first = ansible_playbook(lab_env, NODE_REBOOT, variables, inventory=inventory)
        second = ansible_playbook(lab_env, NODE_REBOOT, variables, inventory=inventory)

    summary = first.summary()
    # 3.2.1 sdk/go/dispatch/dispatch.go: the tracker closes on Queued, final or priority 0
    # and the dispatcher cancels the Slurm job; a container UUID the API lacks is left
    # alone. 1.4.3 crunch_dispatch.rb:892-900 cancels the Slurm job of a missing job UUID.
    assert predicted.summary()[0].startswith("4 stray Slurm jobs would be stopped")
    assert summary[0].startswith("4 stray Slurm jobs stopped")
    assert sorted(summary[0].split(": ")[1].split(" (")[0].split(", ")) == sorted(
        [complete_job, cancelled_container, queued_container, missing_job]
    )
    assert summary[1].startswith("2 orphaned crunch v1 jobs failed")
    assert summary[2].startswith("0 crunch v1 jobs awaiting crunch-dispatch.rb's retry")
    assert "(whether crunch-dispatch.rb runs: stopped; localhost: crunch-dispatch.rb: no process)" in summary[2]
    assert lost_container in summary[4] and live_container not in summary[4]
    # Other tests' Slurm jobs on the shared lab are named after UUIDs this database lacks too.
    assert re.match(
        r"[2-9][0-9]* Slurm jobs named after UUIDs the database lacks: jobs stopped with the strays,"
        r" containers left alone \(as Arvados: crunch-dispatch.rb cancels them, crunch-dispatch-slurm does not\)",
        summary[5],
    ), summary[5]
    assert "jobs would be stopped with the strays, containers left alone" in predicted.summary()[5]
    # No arvados_dispatchers host: the state is unknown, never "not running".
    assert summary[6].startswith("Dispatcher: unknown: no session holds the Dispatch advisory lock (10005)")
    assert "the inventory has no arvados_dispatchers host to ask" in summary[6]
    assert summary[TOUCHED] == (
        "Slurm jobs touched: those of user root (crunch v1 jobs: localhost: crunch_job_user in %s (production);"
        " containers: %s)" % (application_yml, NO_DISPATCHER_HOST)
    )
    assert predicted.summary()[TOUCHED] == summary[TOUCHED].replace("touched", "that would be touched", 1)
    assert summary[OTHERS].startswith("0 Slurm jobs of other users named like stray work left alone")
    assert task_outcome(first.stdout, "Summarize") == "ok"
    assert {uuid: records.state("jobs", uuid) for uuid in (live_job, killed_job, node_job)} == {
        live_job: "Running",
        killed_job: "Failed",
        node_job: "Failed",
    }
    queued = {job.name for job in slurm.queue().values()}
    assert {live_job, live_container, missing_container} <= queued
    assert not {complete_job, cancelled_container, queued_container, missing_job} & queued
    assert records.state("containers", lost_container) == "Running"
    assert first.changed >= 2
    assert second.changed == 0, second.stdout[-3000:]
    assert second.summary()[0].startswith("0 stray Slurm jobs stopped")


def test_a_job_with_its_slurm_job_alive_is_never_touched(fresh_db, lab_env, slurm, records, tmp_path):
    live_job = records.job("Running")
    slurm.submit(live_job, hold=True)

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, reconcile_orphans="always"))

    assert run.changed == 0
    assert records.state("jobs", live_job) == "Running"
    assert live_job in {job.name for job in slurm.queue().values()}


def test_without_evidence_nothing_is_failed_and_the_summary_says_why(fresh_db, lab_env, records, tmp_path):
    lost_job = records.job("Running")

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path))

    assert run.changed == 0
    assert records.state("jobs", lost_job) == "Running"
    assert run.summary()[3].startswith("Orphans withheld: jobs; Slurm shows no Slurm job")


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        ({"reconcile_orphans": "sometimes"}, "reconcile_orphans one of evidence, always, never (got sometimes)"),
        (
            {"reconcile_crunch_v1_dispatcher": "maybe"},
            "reconcile_crunch_v1_dispatcher one of auto, running, stopped, unknown (got maybe)",
        ),
    ],
)
def test_a_bad_variable_fails_before_anything_changes(fresh_db, lab_env, records, tmp_path, variable, message):
    lost_job = records.job("Running")
    completed = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, **variable), expect_rc=2)
    assert message in completed.stdout
    assert records.state("jobs", lost_job) == "Running"


def test_bad_settings_for_the_api_host_fail_before_a_slurm_job_is_stopped(fresh_db, lab_env, slurm, records, tmp_path):
    """recover_db is used on arvados_api only after the reconciling play has stopped the
    stray Slurm jobs (with reconcile_db): it is read before that play changes anything."""
    finished = records.container("Complete", priority=0)
    stray = slurm.submit(finished, hold=True)
    good = {"config_file": str(write_config(fresh_db, tmp_path))}
    typo = dict(good, db_passwd="Typo-Pw-5d1e")

    completed = ansible_playbook(
        lab_env,
        NODE_REBOOT,
        playbook_vars(fresh_db, tmp_path, reconcile_db=good, recover_db=typo),
        flags=["-vvv"],
        expect_rc=2,
    )

    assert "recover_db: unknown option(s): db_passwd (ansible-doc" in completed.stdout
    assert "Typo-Pw-5d1e" not in completed.stdout + completed.stderr
    assert stray in slurm.queue()


# -- crunch-dispatch.rb's retry: 1.4.3 services/api/lib/crunch_dispatch.rb ------------------
# crunch-job exits 93 on node failure (EXIT_RETRY_UNLOCKED) and crunch-dispatch.rb keeps the
# job Running in @todo_job_retries, with no Slurm job, until it runs it again.


def v1_job_without_its_slurm_job(slurm, records):
    """A Running job with no Slurm job, beside one whose Slurm job is queued (the evidence
    that this Slurm runs the jobs)."""
    lost_job = records.job("Running")
    live_job = records.job("Running")
    slurm.submit(live_job, hold=True)
    return lost_job


def test_a_v1_job_is_left_to_the_running_crunch_dispatch_rb(fresh_db, lab_env, slurm, records, tmp_path):
    lost_job = v1_job_without_its_slurm_job(slurm, records)
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")

    with stand_in(tmp_path, "script/crunch-dispatch.rb") as dispatcher:
        run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory)

    summary = run.summary()
    assert summary[1].startswith("0 orphaned crunch v1 jobs failed")
    assert summary[2] == (
        "1 crunch v1 jobs awaiting crunch-dispatch.rb's retry, left Running, not failed (whether crunch-dispatch.rb"
        " runs: running; localhost: crunch-dispatch.rb: process %d): %s" % (dispatcher.pid, lost_job)
    )
    assert records.state("jobs", lost_job) == "Running"
    assert run.changed == 0


def test_a_v1_job_awaiting_the_retry_too_long_is_reported_overdue_not_failed(
    fresh_db, lab_env, slurm, records, tmp_path
):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:50: @todo_job_retries is in memory only; a
    # restarted crunch-dispatch.rb never retries the job, which stays Running for ever.
    lost_job = v1_job_without_its_slurm_job(slurm, records)
    records.modified("jobs", lost_job, 1200)
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")

    with stand_in(tmp_path, "script/crunch-dispatch.rb") as dispatcher:
        run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory)
        tolerant = ansible_playbook(
            lab_env,
            NODE_REBOOT,
            playbook_vars(fresh_db, tmp_path, reconcile_retry_overdue_after=7200),
            inventory=inventory,
        )

    line = run.summary()[2]
    head = (
        "1 crunch v1 jobs awaiting crunch-dispatch.rb's retry, left Running, not failed (whether crunch-dispatch.rb"
        " runs: running; localhost: crunch-dispatch.rb: process %d): %s" % (dispatcher.pid, lost_job)
    )
    assert line.startswith(head + "; 1 overdue, awaiting it longer than 900.0 s (a restarted crunch-dispatch.rb")
    age = re.search(r": %s (\d+) s$" % lost_job, line)
    assert age and 1200 <= int(age.group(1)) < 1260, line
    assert tolerant.summary()[2] == head
    assert records.state("jobs", lost_job) == "Running"
    assert run.changed == 0


def test_without_crunch_dispatch_rb_the_v1_job_is_failed(fresh_db, lab_env, slurm, records, tmp_path):
    lost_job = v1_job_without_its_slurm_job(slurm, records)
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory)

    assert run.summary()[1].startswith("1 orphaned crunch v1 jobs failed: %s, " % lost_job)
    assert records.state("jobs", lost_job) == "Failed"


def test_without_a_crunch_v1_dispatcher_host_the_v1_job_is_not_failed(fresh_db, lab_env, slurm, records, tmp_path):
    lost_job = v1_job_without_its_slurm_job(slurm, records)

    unknown = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path))

    assert unknown.summary()[2].startswith(
        "1 crunch v1 jobs awaiting crunch-dispatch.rb's retry, left Running, not failed (whether crunch-dispatch.rb"
        " runs: unknown; no crunch_v1_dispatcher host in the inventory"
    )
    assert records.state("jobs", lost_job) == "Running"

    stated = ansible_playbook(
        lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, reconcile_crunch_v1_dispatcher="stopped")
    )

    assert stated.summary()[1].startswith("1 orphaned crunch v1 jobs failed: %s" % lost_job)
    assert records.state("jobs", lost_job) == "Failed"


# -- the container dispatcher: 3.2.1 (and 2.5.0, 2.7.4) ----------------------------------
# services/crunch-dispatch-slurm/crunch-dispatch-slurm.go, lib/dispatchcloud/dispatcher.go,
# lib/lsf/dispatch.go: dblock.Dispatch.Lock once at start, never Check(). A dispatcher
# alive without the lock (after a PostgreSQL restart) is not "no dispatcher".


def test_a_dispatcher_without_the_lock_is_reported_and_no_second_one_is_started(
    fresh_db, lab_env, slurm, records, tmp_path
):
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher", "arvados_dispatchers")

    with stand_in(tmp_path, "crunch-dispatch-slurm") as dispatcher:
        run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory)
        alive = subprocess.run(
            ["pgrep", "-f", "--", "^(\\S*/)?crunch-dispatch-slurm( |$)"], capture_output=True, text=True, check=False
        ).stdout.split()

    line = run.summary()[6]
    assert line.startswith("Dispatcher: running_without_lock: no session holds the Dispatch advisory lock (10005)")
    assert "localhost: no systemd (no unit to ask); crunch-dispatch-slurm: process %d" % dispatcher.pid in line
    assert line.endswith(
        "Fix: restart it (systemctl restart crunch-dispatch-slurm on localhost) so that it takes the lock again;"
        " never start a second one."
    )
    assert task_outcome(run.stdout, START_TASK) == "skipping"
    # Only the stand-in: nothing else named crunch-dispatch-slurm was started.
    assert alive == [str(dispatcher.pid)]


@pytest.mark.parametrize("release", ["2.4.4", "1.4.3"])
def test_before_2_5_a_live_dispatcher_without_the_lock_is_running(fresh_db, lab_env, records, tmp_path, release):
    # 2.4.4 lib/controller/dblock/dblock.go:18 has only TrashSweep; 2.5.0 dblock.go:24 adds
    # Dispatch, taken at 2.5.0 crunch-dispatch-slurm.go:144. An older dispatcher never
    # holds it: "restart it so that it takes the lock again" could never work there.
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher", "arvados_dispatchers")
    variables = playbook_vars(fresh_db, tmp_path, recover_arvados_version=release)

    with stand_in(tmp_path, "crunch-dispatch-slurm") as dispatcher:
        run = ansible_playbook(lab_env, NODE_REBOOT, variables, inventory=inventory)

    line = run.summary()[6]
    assert line == (
        "Dispatcher: running: before Arvados 2.5 dispatchers take no Dispatch lock, so the unit and the process"
        " alone tell: crunch-dispatch-slurm is alive (localhost: no systemd (no unit to ask);"
        " crunch-dispatch-slurm: process %d)" % dispatcher.pid
    )
    assert "running_without_lock" not in run.stdout.split("TASK [Summarize]")[1]
    assert task_outcome(run.stdout, START_TASK) == "skipping"

    gone = ansible_playbook(lab_env, NODE_REBOOT, dict(variables, recover_start_dispatcher=False), inventory=inventory)

    assert gone.summary()[6].startswith(
        "Dispatcher: not_running: before Arvados 2.5 dispatchers take no Dispatch lock, so the unit and the process"
        " alone tell: no arvados_dispatchers host runs crunch-dispatch-slurm"
    )
    assert run.changed == 0


def test_no_dispatcher_anywhere_is_not_running_and_without_systemd_it_is_started_by_hand(
    fresh_db, lab_env, slurm, records, tmp_path
):
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher", "arvados_dispatchers")

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory)

    line = run.summary()[6]
    assert line.startswith("Dispatcher: not_running: no session holds the Dispatch advisory lock (10005) and no")
    assert line.endswith(
        "Fix: start crunch-dispatch-slurm by hand on one arvados_dispatchers host (none runs systemd)."
    )
    assert task_outcome(run.stdout, START_TASK) == "skipping"


def test_a_dispatcher_host_that_cannot_be_asked_makes_it_unknown(fresh_db, lab_env, tmp_path):
    inventory_path = lab_inventory(tmp_path, "arvados_dispatchers")
    inventory = json.loads(inventory_path.read_text())
    # Nothing listens on port 9 here: ssh is refused at once, the host is unreachable.
    inventory["all"]["children"]["arvados_dispatchers"]["hosts"]["gone"] = {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": 9,
        "ansible_ssh_common_args": "-o BatchMode=yes -o ConnectTimeout=5",
    }
    inventory_path.write_text(json.dumps(inventory))

    # Whose Slurm jobs the dispatcher submits cannot be told from a host that cannot be asked.
    refused = ansible_playbook(
        lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory_path, expect_rc=2
    )
    said = refused.stdout + refused.stderr
    assert (
        "Whose Slurm jobs to stop cannot be told, so nothing was changed: containers: not every one of the"
        " arvados_dispatchers hosts could tell (gone: /etc/arvados/crunch-dispatch-slurm/crunch-dispatch-slurm.yml:"
        " unreachable: "
    ) in said
    assert "Set recover_slurm_user to the Slurm user that submits them" in said
    assert "TASK [Compare Slurm's queue with the database" not in said

    run = ansible_playbook(
        lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, recover_slurm_user="root"), inventory=inventory_path
    )

    line = run.summary()[6]
    assert line.startswith(
        "Dispatcher: unknown: no session holds the Dispatch advisory lock (10005), and not every"
        " arvados_dispatchers host could be asked (localhost: no systemd (no unit to ask); crunch-dispatch-slurm:"
        " no process; gone: unit crunch-dispatch-slurm: unreachable: "
    ), line
    assert task_outcome(run.stdout, START_TASK) == "skipping"


def test_a_missing_uuid_is_stopped_as_arvados_does_unless_told(fresh_db, lab_env, slurm, tmp_path):
    # 1.4.3 crunch_dispatch.rb:892-900 cancels a Slurm job named after a job UUID the jobs
    # table lacks; 3.2.1 sdk/go/dispatch/dispatch.go: the tracker's GET fails, nothing is
    # cancelled. A cluster prefix of this test's own: other tests' jobs on the shared lab
    # are missing from this database too, and must not be stopped.
    prefix = new_uuid(rh.PREFIX, CONTAINER_INFIX)[-5:]
    missing_container = new_uuid(prefix, CONTAINER_INFIX)
    missing_job = new_uuid(prefix, JOB_INFIX)
    kept_job = new_uuid(prefix, JOB_INFIX)
    slurm.submit(missing_container, hold=True)
    slurm.submit(missing_job, hold=True)
    # The lab's Slurm jobs are root's; crunch v1 jobs' Slurm user defaults to crunch.
    variables = playbook_vars(fresh_db, tmp_path, reconcile_cluster_prefix=prefix, recover_slurm_user="*")

    refused = ansible_playbook(lab_env, NODE_REBOOT, dict(variables, recover_stop_missing=False))

    assert refused.summary()[0].startswith("0 stray Slurm jobs stopped")
    assert refused.summary()[5] == (
        "2 Slurm jobs named after UUIDs the database lacks: jobs left alone, containers left alone"
        " (recover_stop_missing): %s" % ", ".join(sorted([missing_job, missing_container]))
    )
    assert {missing_job, missing_container} <= {job.name for job in slurm.queue().values()}

    default = ansible_playbook(lab_env, NODE_REBOOT, variables)

    assert default.summary()[0] == "1 stray Slurm jobs stopped: %s (1 found)" % missing_job
    assert default.summary()[5].startswith(
        "2 Slurm jobs named after UUIDs the database lacks: jobs stopped with the strays, containers left alone"
        " (as Arvados: crunch-dispatch.rb cancels them, crunch-dispatch-slurm does not)"
    )
    left = {job.name for job in slurm.queue().values()}
    assert missing_container in left and missing_job not in left

    slurm.submit(kept_job, hold=True)
    stopped = ansible_playbook(lab_env, NODE_REBOOT, dict(variables, recover_stop_missing=True))

    assert stopped.summary()[0] == "2 stray Slurm jobs stopped: %s (2 found)" % ", ".join(
        sorted([missing_container, kept_job])
    )
    assert stopped.summary()[5] == (
        "2 Slurm jobs named after UUIDs the database lacks: jobs stopped with the strays, containers stopped"
        " with the strays (recover_stop_missing): %s" % ", ".join(sorted([kept_job, missing_container]))
    )
    assert not {missing_container, kept_job} & {job.name for job in slurm.queue().values()}


def test_a_v1_job_ended_seconds_ago_keeps_its_slurm_job_until_60_s_have_passed(
    fresh_db, lab_env, slurm, records, tmp_path
):
    # 1.4.3 crunch_dispatch.rb:892-896: check_orphaned_slurm_jobs never scancels the Slurm
    # job of a job modified in the last 60 s, whatever its state: crunch-job is still
    # cancelling its tasks and saving its log.
    cancelled = records.job("Cancelled", modified_ago=5)
    slurm_id = slurm.submit(cancelled)
    slurm.wait_for_state(slurm_id, "RUNNING")
    variables = playbook_vars(fresh_db, tmp_path, reconcile_kinds=["jobs"], recover_slurm_user="*")

    fresh = ansible_playbook(lab_env, NODE_REBOOT, variables)

    assert fresh.summary()[0].startswith("0 stray Slurm jobs stopped")
    assert fresh.summary()[ENDING] == (
        "1 Slurm jobs of crunch v1 jobs modified less than 60 s ago left alone, ending (crunch-job is still"
        " saving their work; stray after 60 s): %s" % cancelled
    )
    assert slurm.final_state(slurm_id) == "RUNNING"

    records.modified("jobs", cancelled, 61)
    later = ansible_playbook(lab_env, NODE_REBOOT, variables)

    assert later.summary()[0] == "1 stray Slurm jobs stopped: %s (1 found)" % cancelled
    assert later.summary()[ENDING].startswith("0 Slurm jobs of crunch v1 jobs modified less than 60 s ago")
    assert cancelled not in {job.name for job in slurm.queue().values()}


# -- whose Slurm jobs: the dispatchers' own user ------------------------------------------
# Containers: crunch-dispatch-slurm runs sbatch as its own user, no --uid or sudo
# (services/crunch-dispatch-slurm/slurm.go, 1.4.3 to 3.2.1), and its unit has no User=
# (1.4.3 services/crunch-dispatch-slurm/crunch-dispatch-slurm.service, 2.7.4 and 3.2.1
# cmd/arvados-server/crunch-dispatch-slurm.service): root. Crunch v1 jobs: salloc under
# `sudo -E -u CrunchJobUser` (1.4.3 services/api/lib/crunch_dispatch.rb), default crunch.


def queued_names(slurm) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for job in slurm.queue().values():
        names.setdefault(job.name, set()).add(job.user)
    return names


def test_another_users_slurm_job_of_a_finished_container_is_left_alone_unless_every_user_is_asked(
    fresh_db, lab_env, slurm, records, tmp_path
):
    finished = records.container("Complete", priority=0)
    cancelled = records.container("Cancelled", priority=0)
    ours = slurm.submit(finished, hold=True)
    theirs = slurm.submit(cancelled, hold=True, user="nobody")
    theirs_too = slurm.submit(finished, hold=True, user="nobody")

    default = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path))

    summary = default.summary()
    assert summary[0] == "1 stray Slurm jobs stopped: %s (1 found)" % finished
    assert summary[TOUCHED] == (
        "Slurm jobs touched: for crunch v1 jobs, those of user crunch (%s); for containers, those of user root (%s)"
        % (NO_V1_HOST, NO_DISPATCHER_HOST)
    )
    assert summary[OTHERS] == (
        "2 Slurm jobs of other users named like stray work left alone (recover_slurm_user chooses whose are"
        " stopped): %s of nobody, %s of nobody" % tuple(sorted([finished, cancelled]))
    )
    left = slurm.queue()
    assert ours not in left
    assert {theirs, theirs_too} <= set(left)

    everyone = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, recover_slurm_user="*"))

    summary = everyone.summary()
    assert summary[0] == "2 stray Slurm jobs stopped: %s (2 found)" % ", ".join(sorted([finished, cancelled]))
    assert summary[TOUCHED] == 'Slurm jobs touched: those of every user (recover_slurm_user: "*")'
    assert summary[OTHERS].startswith("0 Slurm jobs of other users")
    assert not {finished, cancelled} & set(queued_names(slurm))


def test_the_dispatchers_process_names_whose_slurm_jobs_are_stopped(fresh_db, lab_env, slurm, records, tmp_path):
    finished = records.container("Complete", priority=0)
    roots = slurm.submit(finished, hold=True)
    nobodys = slurm.submit(finished, hold=True, user="nobody")
    inventory = lab_inventory(tmp_path, "arvados_dispatchers")

    with stand_in(tmp_path, "crunch-dispatch-slurm", user="nobody") as dispatcher:
        run = ansible_playbook(
            lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, reconcile_kinds=["containers"]), inventory=inventory
        )

    summary = run.summary()
    assert summary[0] == "1 stray Slurm jobs stopped: %s (1 found)" % finished
    assert summary[TOUCHED] == (
        "Slurm jobs touched: those of user nobody (containers: localhost: crunch-dispatch-slurm process %d runs as"
        " nobody)" % dispatcher.pid
    )
    assert summary[OTHERS] == (
        "1 Slurm jobs of other users named like stray work left alone (recover_slurm_user chooses whose are"
        " stopped): %s of root" % finished
    )
    left = slurm.queue()
    assert nobodys not in left and roots in left


def test_crunch_job_user_false_cannot_tell_whose_jobs_and_nothing_changes(fresh_db, lab_env, slurm, records, tmp_path):
    complete_job = records.job("Complete")
    held = slurm.submit(complete_job, hold=True)
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")
    application_yml = crunch_v1_application_yml(tmp_path, False)

    refused = ansible_playbook(
        lab_env,
        NODE_REBOOT,
        playbook_vars(fresh_db, tmp_path, recover_crunch_v1_application_yml=str(application_yml)),
        inventory=inventory,
        expect_rc=2,
    )

    said = refused.stdout + refused.stderr
    assert (
        "crunch v1 jobs: not every one of the crunch_v1_dispatcher hosts could tell (localhost: crunch_job_user in"
        " %s (production) is False: crunch-dispatch.rb then runs salloc without sudo" % application_yml
    ) in said
    assert held in slurm.queue()

    told = ansible_playbook(
        lab_env,
        NODE_REBOOT,
        playbook_vars(
            fresh_db,
            tmp_path,
            recover_crunch_v1_application_yml=str(application_yml),
            recover_slurm_user={"jobs": "root"},
        ),
        inventory=inventory,
    )

    assert told.summary()[0] == "1 stray Slurm jobs stopped: %s (1 found)" % complete_job
    assert told.summary()[TOUCHED] == (
        "Slurm jobs touched: those of user root (crunch v1 jobs: recover_slurm_user; containers: %s)"
        % NO_DISPATCHER_HOST
    )


def test_sbatch_uid_in_the_dispatchers_config_names_whose_slurm_jobs_are_stopped(
    fresh_db, lab_env, slurm, records, tmp_path
):
    # Running as root, crunch-dispatch-slurm passes SbatchArgumentsList to sbatch as given
    # (3.2.1 services/crunch-dispatch-slurm/crunch-dispatch-slurm.go): --uid makes the
    # Slurm jobs that user's.
    finished = records.container("Complete", priority=0)
    roots = slurm.submit(finished, hold=True)
    nobodys = slurm.submit(finished, hold=True, user="nobody")
    config = tmp_path / "dispatcher-config.yml"
    config.write_text(
        yaml.safe_dump(
            {"Clusters": {rh.PREFIX: {"Containers": {"SLURM": {"SbatchArgumentsList": ["--uid=nobody", "--mem=%M"]}}}}}
        )
    )
    inventory = lab_inventory(tmp_path, "arvados_dispatchers")

    run = ansible_playbook(
        lab_env,
        NODE_REBOOT,
        playbook_vars(fresh_db, tmp_path, reconcile_kinds=["containers"], recover_dispatcher_config=str(config)),
        inventory=inventory,
    )

    summary = run.summary()
    assert summary[TOUCHED] == (
        "Slurm jobs touched: those of user nobody (containers: localhost: sbatch --uid=nobody in"
        " Containers.SLURM.SbatchArgumentsList in %s)" % config
    )
    assert summary[OTHERS].endswith(": %s of root" % finished)
    left = slurm.queue()
    assert nobodys not in left and roots in left
