"""arvados_reconcile_info, the watch and recover_after_node_reboot.yml on crunch v1 as
crunch-dispatch.rb 1.4.3 leaves it (crunch_dispatch_replay.py), on Arvados 1.4.3's schema,
with a real Slurm job wherever crunch-job's `salloc --job-name=<uuid>` would hold one.

The world, at the database's clock, while crunch-dispatch.rb runs (a stand-in process for
the playbook):
- `alive`: dispatched and locked 20 minutes ago, crunch-job running: its Slurm job is live;
- `just_done`: crunch-job wrote Complete 5 s ago; its allocation has not left Slurm yet:
  ending, never stray (check_orphaned_slurm_jobs spares a job modified within 60 s,
  1.4.3 services/api/lib/crunch_dispatch.rb:892-896);
- `cancelled`: its user cancelled it 90 s ago and its allocation lingers: stray;
- `retrying`: crunch-job exited 93 a minute after its lock, 2 minutes ago: Running with no
  Slurm job, in @todo_job_retries (:678-693): awaiting the retry, not orphaned;
- `forgotten`: the same 25 minutes ago, then crunch-dispatch.rb was restarted (its retry
  list is in memory only, :50): awaiting a retry nobody will make, overdue past 900 s;
- `requeued`: a tempfail (exit 75) left it Queued with its token: no Slurm job, nothing to do;
- a Slurm job named after a job UUID the database lacks: stray (1.4.3 cancels it, :892-900).
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import JOB_INFIX, new_uuid
from tests.integration import crunch_dispatch_replay as replay
from tests.integration import fail_jobs_helpers as h
from tests.integration import reconcile_helpers as rh
from tests.integration.conftest import schema_database
from tests.integration.test_crunch_v1_replay import SCHEMA_1_4_3
from tests.integration.test_playbooks import ansible_playbook
from tests.integration.test_recover_after_node_reboot import (
    NODE_REBOOT,
    crunch_v1_application_yml,
    lab_inventory,
    playbook_vars,
    stand_in,
)
from tests.integration.test_watch_command import P, run_watch

pytestmark = pytest.mark.usefixtures("linked_collection")


class World:
    """The replayed database, its Slurm jobs and the labels of its jobs."""

    def __init__(self, database, slurm):
        self.database = database
        self.conn = database.connect()
        now = h.db_now(self.conn)
        self.conn.execute(
            "INSERT INTO users (id, uuid, owner_uuid, created_at, updated_at, is_admin, is_active)"
            " VALUES (1, %s, %s, now(), now(), true, true)",
            (replay.SYSTEM_USER, replay.SYSTEM_USER),
        )
        self.dispatcher = replay.Dispatcher(self.conn, now - timedelta(hours=1), random.Random(33))
        self.dispatcher.user(is_admin=True)
        self.user = self.dispatcher.user()
        self.now = now
        self.jobs: dict[str, str] = {}
        self.slurm_ids: dict[str, str] = {}
        self.slurm = slurm

    def at(self, seconds_ago: float) -> None:
        self.dispatcher.clock = self.now - timedelta(seconds=seconds_ago)

    def job(self, label: str, *paths: tuple[float, str]) -> str:
        """A job submitted an hour ago that goes through `paths`, each (seconds ago, path)."""
        self.at(3600)
        uuid = self.dispatcher.submit(self.user)
        for seconds_ago, path in paths:
            self.at(seconds_ago)
            getattr(self.dispatcher, path)(uuid)
        self.jobs[label] = uuid
        return uuid

    def salloc(self, label: str) -> None:
        """The Slurm job crunch-dispatch.rb's `salloc --job-name=<uuid>` holds, held pending:
        the lab's one node has two CPUs, and the rules judge a job by its name, not its state."""
        self.slurm_ids[label] = self.slurm.submit(self.jobs[label], hold=True)


def build(database, slurm) -> World:
    world = World(database, slurm)
    world.job("alive", (1200, "dispatch"), (1199, "crunch_job_locks"))
    world.job("just_done", (1200, "dispatch"), (1199, "crunch_job_locks"), (5, "crunch_job_succeeds"))
    world.job("cancelled", (1200, "dispatch"), (1199, "crunch_job_locks"), (90, "user_cancels"))
    world.job("retrying", (180, "dispatch"), (179, "crunch_job_locks"), (120, "exit_node_failure"))
    world.job("forgotten", (1600, "dispatch"), (1599, "crunch_job_locks"), (1500, "exit_node_failure"))
    world.job("requeued", (300, "dispatch"), (299, "exit_tempfail"))
    world.conn.commit()
    assert world.dispatcher.job_retry_counts.keys() == {world.jobs["retrying"], world.jobs["forgotten"]}
    for label in ("alive", "just_done", "cancelled"):
        world.salloc(label)
    world.jobs["missing"] = new_uuid(replay.PREFIX, JOB_INFIX)
    world.salloc("missing")
    return world


@pytest.fixture
def world(lab, slurm):
    with schema_database(lab, SCHEMA_1_4_3) as database:
        built = build(database, slurm)
        yield built
        built.conn.close()


def by_label(world: World, uuids) -> list[str]:
    labels = {uuid: label for label, uuid in world.jobs.items()}
    return sorted(labels.get(uuid, uuid) for uuid in uuids)


def test_the_module_judges_each_path_as_crunch_dispatch_rb_does(world, lab_env, tmp_path):
    config = world.database.write_arvados_config(tmp_path / "config.yml")
    result = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"], crunch_v1_dispatcher="running")
    )

    assert not result.get("failed"), result.get("msg")
    ours = set(world.jobs.values())
    assert by_label(world, {e["name"] for e in result["stray_slurm_jobs"]} & ours) == ["cancelled", "missing"]
    assert by_label(world, {e["name"] for e in result["jobs_ending"]} & ours) == ["just_done"]
    awaiting = {e["uuid"]: e for e in result["jobs_awaiting_retry"]}
    assert by_label(world, awaiting) == ["forgotten", "retrying"]
    assert awaiting[world.jobs["forgotten"]]["overdue"] is True
    assert awaiting[world.jobs["retrying"]]["overdue"] is False
    assert result["orphaned_jobs"] == []


def test_the_watch_counts_them(world, lab_env, tmp_path):
    metrics = tmp_path / "arvados_recovery.prom"
    options = {
        "config_file": str(world.database.write_arvados_config(tmp_path / "config.yml")),
        "cluster_prefix": rh.PREFIX,
        "settle": 1,
        "db_wait": 0,
        "metrics_file": str(metrics),
        "dispatcher_unit": "",
        "kinds": ["jobs"],
        "crunch_v1_dispatcher": "running",
    }

    completed = run_watch(lab_env, tmp_path, options)

    assert completed.returncode == 0, completed.stderr
    text = metrics.read_text()
    assert "%sjobs_awaiting_retry 2\n" % P in text
    assert "%sjobs_retry_overdue 1\n" % P in text
    assert '%sorphans{kind="job",state="Running"} 0\n' % P in text


def test_the_node_playbook_stops_the_strays_and_leaves_the_ending_and_the_retries(world, lab_env, tmp_path):
    inventory = lab_inventory(tmp_path, "crunch_v1_dispatcher")
    # The lab's Slurm jobs are root's: crunch_job_user says so, as on a site that set it.
    application_yml = crunch_v1_application_yml(tmp_path, "root")
    variables = playbook_vars(
        world.database, tmp_path, reconcile_kinds=["jobs"], recover_crunch_v1_application_yml=str(application_yml)
    )

    with stand_in(tmp_path, "script/crunch-dispatch.rb"):
        run = ansible_playbook(lab_env, NODE_REBOOT, variables, inventory=inventory)

    queued = {job.name for job in world.slurm.queue().values()}
    assert {world.jobs["alive"], world.jobs["just_done"]} <= queued
    assert not {world.jobs["cancelled"], world.jobs["missing"]} & queued
    states = {label: world.dispatcher.jobs[uuid].state for label, uuid in world.jobs.items() if label != "missing"}
    with world.database.connect() as conn:
        in_db = {uuid: row["state"] for uuid, row in h.jobs(conn).items()}
    assert {label: in_db[world.jobs[label]] for label in states} == states
    summary = run.summary()
    # Other Slurm jobs on the lab named after job UUIDs this database lacks are stray too.
    assert " stray Slurm jobs stopped" in summary[0]
    assert world.jobs["cancelled"] in summary[0] and world.jobs["missing"] in summary[0]
    assert world.jobs["just_done"] not in summary[0] and world.jobs["alive"] not in summary[0]
    assert summary[1].startswith("0 orphaned crunch v1 jobs failed")
    assert summary[2].startswith("2 crunch v1 jobs awaiting crunch-dispatch.rb's retry")
    assert "1 overdue" in summary[2]
