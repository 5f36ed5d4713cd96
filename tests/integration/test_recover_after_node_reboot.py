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
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from plugins.module_utils.uuids import CONTAINER_INFIX, new_uuid
from tests.integration import reconcile_helpers as rh
from tests.integration.fail_jobs_helpers import write_config
from tests.integration.test_playbooks import LAB_INVENTORY, PLAYBOOKS, ansible_playbook

NODE_REBOOT = PLAYBOOKS / "recover_after_node_reboot.yml"
START_TASK = "Start the dispatcher (it then recovers the containers through the API)"

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


@contextlib.contextmanager
def stand_in(tmp_path: Path, program: str):
    """A process whose command line is `<tmp_path>/<program> 600`: sleep(1) under that name."""
    path = tmp_path / "stand-in" / program
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(shutil.which("sleep"), path)
    process = subprocess.Popen([str(path), "600"])
    try:
        assert rh.wait_for(lambda: Path("/proc/%d/cmdline" % process.pid).read_bytes().startswith(bytes(path)), 30)
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)


def task_outcome(stdout: str, task: str) -> str:
    """The first status line after a task's header ('ok', 'changed', 'skipping', ...)."""
    after = stdout.split("TASK [%s]" % task, 1)
    assert len(after) == 2, "no task %r in:\n%s" % (task, stdout[-3000:])
    return re.search(r"^(ok|changed|skipping|fatal|failed): ", after[1], re.M).group(1)


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
    held = {
        uuid: slurm.submit(uuid, hold=True)
        for uuid in (live_job, complete_job, live_container, cancelled_container, queued_container, missing_container)
    }
    killed_id = slurm.submit(killed_job)
    node_id = rh.submit_like_the_dispatcher(slurm, node_job)
    slurm.wait_for_state(node_id, "RUNNING")
    slurm.run("scancel", killed_id)
    # No crunch-dispatch.rb runs on the crunch_v1_dispatcher host (this one): the jobs
    # without a Slurm job are nobody's to retry.
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")
    with rh.node_down(slurm):
        assert rh.wait_for(lambda: slurm.final_state(node_id) == "NODE_FAIL", 30), slurm.final_state(node_id)
        variables = playbook_vars(fresh_db, tmp_path)

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
    # and the dispatcher cancels the Slurm job; a UUID the API lacks is left alone.
    assert predicted.summary()[0].startswith("3 stray Slurm jobs would be stopped")
    assert summary[0].startswith("3 stray Slurm jobs stopped")
    assert sorted(summary[0].split(": ")[1].split(" (")[0].split(", ")) == sorted(
        [complete_job, cancelled_container, queued_container]
    )
    assert summary[1].startswith("2 orphaned crunch v1 jobs failed")
    assert summary[2].startswith("0 crunch v1 jobs awaiting crunch-dispatch.rb's retry")
    assert "(whether crunch-dispatch.rb runs: stopped; localhost: crunch-dispatch.rb: no process)" in summary[2]
    assert lost_container in summary[4] and live_container not in summary[4]
    # Other tests' Slurm jobs on the shared lab are named after UUIDs this database lacks too.
    assert re.match(
        r"[1-9][0-9]* Slurm jobs named after UUIDs the database lacks left alone, as Arvados leaves them"
        r" \(recover_stop_missing=true stops them\)",
        summary[5],
    ), summary[5]
    # No arvados_dispatchers host: the state is unknown, never "not running".
    assert summary[6].startswith("Dispatcher: unknown: no session holds the Dispatch advisory lock (10005)")
    assert "the inventory has no arvados_dispatchers host to ask" in summary[6]
    assert task_outcome(first.stdout, "Summarize") == "ok"
    assert {uuid: records.state("jobs", uuid) for uuid in (live_job, killed_job, node_job)} == {
        live_job: "Running",
        killed_job: "Failed",
        node_job: "Failed",
    }
    queued = {job.name for job in slurm.queue().values()}
    assert {live_job, live_container, missing_container} <= queued
    assert not {complete_job, cancelled_container, queued_container} & queued
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

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path), inventory=inventory_path)

    line = run.summary()[6]
    assert line.startswith(
        "Dispatcher: unknown: no session holds the Dispatch advisory lock (10005), and not every"
        " arvados_dispatchers host could be asked (localhost: no systemd (no unit to ask); crunch-dispatch-slurm:"
        " no process; gone: unit crunch-dispatch-slurm: unreachable: "
    ), line
    assert task_outcome(run.stdout, START_TASK) == "skipping"


def test_a_uuid_missing_from_the_database_is_stopped_only_when_asked(fresh_db, lab_env, slurm, tmp_path):
    # 3.2.1 sdk/go/dispatch/dispatch.go: the tracker's GET fails, nothing is cancelled.
    # A cluster prefix of this test's own: other tests' jobs on the shared lab are missing
    # from this database too, and must not be stopped.
    prefix = new_uuid(rh.PREFIX, CONTAINER_INFIX)[-5:]
    missing_container = new_uuid(prefix, CONTAINER_INFIX)
    slurm.submit(missing_container, hold=True)
    variables = playbook_vars(fresh_db, tmp_path, reconcile_cluster_prefix=prefix)

    left = ansible_playbook(lab_env, NODE_REBOOT, variables)

    assert left.summary()[0].startswith("0 stray Slurm jobs stopped")
    assert left.summary()[5].startswith("1 Slurm jobs named after UUIDs the database lacks left alone")
    assert missing_container in {job.name for job in slurm.queue().values()}

    stopped = ansible_playbook(lab_env, NODE_REBOOT, dict(variables, recover_stop_missing=True))

    assert stopped.summary()[0] == "1 stray Slurm jobs stopped: %s (1 found)" % missing_container
    assert stopped.summary()[5] == (
        "1 Slurm jobs named after UUIDs the database lacks stopped with the strays (recover_stop_missing): "
        + missing_container
    )
    assert missing_container not in {job.name for job in slurm.queue().values()}
