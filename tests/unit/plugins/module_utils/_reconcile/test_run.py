# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The reconciliation's decisions with a fake clock, a scripted squeue and a fake database
whose rows a test may change between the two listings; its options, its squeue and scontrol,
and the message of a read that failed."""

from __future__ import annotations

import contextlib
import gc
import types
from typing import Callable, Dict, List, Optional

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.engine import (
    CONTAINERS,
    JOBS,
    Candidates,
    Listing,
    Record,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.locked_containers import (
    UNKNOWN_LIMIT,
    DispatchLimit,
    LockToken,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.run import (
    NodeLister,
    ReconcileOptions,
    Reconciler,
    SlurmLister,
    _drafts,
    _Read,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import SlurmJob
from tests.unit.plugins.module_utils._reconcile.conftest import (
    CTR_A,
    CTR_B,
    JOB_A,
    JOB_B,
    JOB_C,
    LOCK,
    P,
    container,
    job,
    line,
    parse_listing,
)
from tests.unit.plugins.module_utils.slurm_fakes import (
    REBOOT_REASON,
    EndedCommand,
    FakeClock,
    FakeNode,
    FakeScontrol,
)


class FakeDatabase:
    def __init__(self, rows: List[Record]) -> None:
        self.rows = {row.uuid: row for row in rows}
        self.statements = 0
        self.holders: List[Dict[str, object]] = []
        self.standby = False
        # By container UUID: its lock_count and the token that locked it, as SQL_LOCK_TOKENS reads them.
        self.locks: Dict[str, LockToken] = {}
        self.lock_reads: List[List[str]] = []

    def kind(self, uuid):
        return JOBS if "-8i9sb-" in uuid else CONTAINERS

    @staticmethod
    def versioned(row):
        """The row as read, with a version that changes whenever a column does (xmin)."""
        return row._replace(version=repr(tuple(row[:7])))

    def in_recovery(self):
        self.statements += 1
        return self.standby

    def read_records(self, kind):
        self.statements += 1
        states = ("Running",) if kind == JOBS else ("Locked", "Running")
        for row in list(self.rows.values()):
            if self.kind(row.uuid) == kind and row.state in states:
                yield self.versioned(row)

    def by_uuid(self, kind, uuids):
        self.statements += 1
        return {
            uuid: self.versioned(self.rows[uuid]) for uuid in uuids if uuid in self.rows and self.kind(uuid) == kind
        }

    @staticmethod
    def pipeline():
        return contextlib.nullcontext()

    def send_reread(self, kind, candidates, record_count):
        versions = [(uuid, row.version) for uuid, row in self.by_uuid(kind, candidates).items()]
        # In chunks of two, as _reconcile.db yields them in chunks.
        return lambda: iter([versions[start : start + 2] for start in range(0, len(versions), 2)])

    def send_by_uuid(self, kind, uuids):
        records = self.by_uuid(kind, uuids)
        return lambda: records

    def send_lock_holders(self):
        self.statements += 1
        holders = list(self.holders)
        return lambda: holders

    def send_lock_tokens(self, uuids):
        self.statements += 1
        self.lock_reads.append(sorted(uuids))
        tokens = {uuid: self.locks[uuid] for uuid in uuids if uuid in self.locks}
        return lambda: tokens

    def cluster_prefix(self):
        return P


class ScriptedLister:
    """Each squeue returns the next output; `between` runs as the second squeue starts,
    so after the scan of the live records and before they are read again."""

    def __init__(self, outputs: List[List[str]], between: Optional[Callable[[], None]] = None):
        self.outputs = list(outputs)
        self.between = between
        self.calls = 0

    def start(self):
        self.calls += 1
        if self.calls == 2 and self.between:
            self.between()
        return self.outputs.pop(0)

    def finish(self, output, prefix, kinds) -> Listing:
        return parse_listing("\n".join(output) + "\n", prefix, kinds)


def options(**overrides):
    values = dict(
        kinds=(JOBS, CONTAINERS),
        settle=10.0,
        orphans="evidence",
        cluster_prefix=P,
        slurm_user=None,
        slurm_clusters=None,
        squeue_path="/bin/true",
        command_timeout=10.0,
        db_wait=0.0,
        query_timeout=60.0,
        batch_size=2,
    )
    values.update(overrides)
    return ReconcileOptions(**values)


def reconcile(db, outputs, between=None, clock=None, **overrides):
    return Reconciler(options(**overrides), db, ScriptedLister(outputs, between), clock or FakeClock()).run()


def uuids(entries):
    return [entry["uuid"] for entry in entries]


# -- strays -------------------------------------------------------------------------------


def test_strays_carry_their_slurm_details_and_reason():
    db = FakeDatabase([job(JOB_A, "Complete"), container(CTR_A, "Cancelled", priority=0), job(JOB_B), container(CTR_B)])
    queue = [
        line("11", JOB_A, nodes="c1"),
        line("12", CTR_A, state="PENDING", nodes=""),
        line("13", JOB_B),
        line("14", CTR_B),
        line("15", JOB_C),
    ]
    result = reconcile(db, [queue, queue], missing_are_stray=True)
    strays = {entry["job_id"]: entry for entry in result["stray_slurm_jobs"]}
    assert sorted(strays) == ["11", "12", "15"]
    assert strays["11"] == {
        "job_id": "11",
        "state": "RUNNING",
        "user": "crunch",
        "nodes": "c1",
        "name": JOB_A,
        "kind": "job",
        "record_state": "Complete",
        "priority": None,
        "reason": "job is Complete: only Running and Queued jobs have a Slurm job",
    }
    assert strays["12"]["record_state"] == "Cancelled"
    assert strays["15"]["reason"].startswith("no job of this UUID in the database")


def test_completing_strays_are_counted_not_listed_and_other_users_are_left_out():
    db = FakeDatabase([job(JOB_A, "Complete"), job(JOB_B, "Failed")])
    queue = [line("1", JOB_A, state="COMPLETING"), line("2", JOB_B, user="alice")]
    result = reconcile(db, [queue, queue], slurm_user="crunch")
    assert result["stray_slurm_jobs"] == []
    assert result["ending_slurm_jobs"] == 1
    assert [(entry["job_id"], entry["user"], entry["record_state"]) for entry in result["skipped_other_user"]] == [
        ("2", "alice", "Failed")
    ]
    assert result["counts"]["skipped_other_user"] == 1


def test_each_kind_has_its_own_slurm_user():
    # 1.4.3 services/api/lib/crunch_dispatch.rb: salloc under `sudo -u CrunchJobUser`;
    # crunch-dispatch-slurm.service (1.4.3 to 3.2.1) has no User=: sbatch as root.
    db = FakeDatabase([job(JOB_A, "Complete"), container(CTR_A, "Cancelled", priority=0)])
    queue = [
        line("1", JOB_A, user="crunch"),
        line("2", JOB_A, user="root"),
        line("3", CTR_A, user="root"),
        line("4", CTR_A, user="crunch"),
    ]
    result = reconcile(db, [queue, queue], slurm_users={JOBS: "crunch", CONTAINERS: "root"})
    assert sorted(entry["job_id"] for entry in result["stray_slurm_jobs"]) == ["1", "3"]
    assert sorted(entry["job_id"] for entry in result["skipped_other_user"]) == ["2", "4"]


def test_a_kind_without_a_slurm_user_takes_every_users_jobs():
    db = FakeDatabase([job(JOB_A, "Complete"), container(CTR_A, "Cancelled", priority=0)])
    queue = [line("1", JOB_A, user="alice"), line("2", CTR_A, user="alice")]
    result = reconcile(db, [queue, queue], slurm_users={CONTAINERS: "root"})
    assert [entry["job_id"] for entry in result["stray_slurm_jobs"]] == ["1"]
    assert [entry["job_id"] for entry in result["skipped_other_user"]] == ["2"]


def test_another_users_job_named_after_a_missing_uuid_is_still_listed_as_missing():
    db = FakeDatabase([])
    queue = [line("1", CTR_A, user="alice")]
    left = reconcile(db, [queue, queue], slurm_user="crunch")
    assert [entry["job_id"] for entry in left["missing_from_database"]] == ["1"]
    assert left["stray_slurm_jobs"] == left["skipped_other_user"] == []
    asked = reconcile(db, [queue, queue], slurm_user="crunch", missing_are_stray=True)
    assert asked["stray_slurm_jobs"] == []
    assert [entry["job_id"] for entry in asked["skipped_other_user"]] == ["1"]


def test_missing_job_uuids_are_stray_by_default_as_crunch_dispatch_rb_cancels_them():
    # 1.4.3 services/api/lib/crunch_dispatch.rb:892-900: squeue's job UUIDs minus those in
    # the jobs table are scancelled; crunch-dispatch-slurm leaves a missing container alone.
    db = FakeDatabase([])
    queue = [line("1", JOB_A), line("2", CTR_A)]
    default = reconcile(db, [queue, queue])
    assert [entry["job_id"] for entry in default["stray_slurm_jobs"]] == ["1"]
    assert sorted(entry["job_id"] for entry in default["missing_from_database"]) == ["1", "2"]
    assert default["missing_are_stray"] is None
    assert default["missing_are_stray_by_kind"] == {JOBS: True, CONTAINERS: False}
    assert default["stray_slurm_jobs"][0]["reason"].startswith(
        "no job of this UUID in the database: crunch-dispatch.rb"
    )
    refused = reconcile(db, [queue, queue], missing_are_stray=False)
    assert refused["stray_slurm_jobs"] == [] and len(refused["missing_from_database"]) == 2
    assert refused["missing_are_stray_by_kind"] == {JOBS: False, CONTAINERS: False}
    every = reconcile(db, [queue, queue], missing_are_stray=True)
    assert sorted(entry["job_id"] for entry in every["stray_slurm_jobs"]) == ["1", "2"]


@pytest.mark.parametrize("state", ["Cancelled", "Complete", "Failed"])
def test_a_v1_job_modified_less_than_60_s_ago_is_ending_not_stray(state):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:892-896: `modified_at > Time.now - 60` spares
    # the Slurm job of a job in any state while crunch-job saves its work.
    db = FakeDatabase([job(JOB_A, state, age=5.0), job(JOB_B, state, age=61.0), job(JOB_C, state, age=59.9)])
    queue = [line("1", JOB_A), line("2", JOB_B), line("3", JOB_C, state="COMPLETING")]
    result = reconcile(db, [queue, queue])
    assert [entry["job_id"] for entry in result["stray_slurm_jobs"]] == ["2"]
    assert [(entry["job_id"], entry["age_seconds"], entry["record_state"]) for entry in result["jobs_ending"]] == [
        ("1", 5.0, state),
        ("3", 59.9, state),
    ]
    assert result["jobs_ending"][0]["reason"].startswith("job is %s, modified 5.0 s ago: crunch-job is still" % state)
    assert result["counts"]["jobs_ending"] == 2 and result["ending_slurm_jobs"] == 0


def test_a_v1_job_without_modified_at_or_a_container_is_never_ending():
    db = FakeDatabase([job(JOB_A, "Cancelled", age=None), container(CTR_A, "Cancelled", age=1.0)])
    queue = [line("1", JOB_A), line("2", CTR_A)]
    result = reconcile(db, [queue, queue])
    assert sorted(entry["job_id"] for entry in result["stray_slurm_jobs"]) == ["1", "2"]
    assert result["jobs_ending"] == []


def test_strays_are_judged_on_the_second_listing():
    db = FakeDatabase([job(JOB_A, "Complete")])
    result = reconcile(db, [[line("1", JOB_A)], []])
    assert result["stray_slurm_jobs"] == []


# -- orphans ------------------------------------------------------------------------------
# Tests about orphaned crunch v1 jobs pass crunch_v1_dispatcher="stopped": only then is a
# job Running without a Slurm job orphaned (1.4.3 services/api/lib/crunch_dispatch.rb,
# reap_children: a live crunch-dispatch.rb may retry it).

STOPPED = {"crunch_v1_dispatcher": "stopped"}


def test_absent_from_both_listings_and_unchanged_is_orphaned():
    db = FakeDatabase([job(JOB_A), job(JOB_B), container(CTR_A, "Locked"), container(CTR_B)])
    queue = [line("1", JOB_A), line("2", CTR_B)]
    result = reconcile(db, [queue, queue], **STOPPED)
    assert uuids(result["orphaned_jobs"]) == [JOB_B]
    assert uuids(result["orphaned_containers"]) == [CTR_A]
    assert result["orphaned_containers"][0]["locked_by_uuid"] == LOCK
    assert result["orphaned_jobs"][0]["started_at"] == "2026-11-30T10:00:00"
    assert result["evidence"] == {
        JOBS: {"live": 2, "with_slurm_job": 1, "without_slurm_job": 1, "recently_modified": 0},
        CONTAINERS: {"live": 2, "with_slurm_job": 1, "without_slurm_job": 1, "recently_modified": 0},
    }
    assert result["jobs_awaiting_retry"] == []


def test_a_slurm_job_submitted_between_the_listings_saves_its_job():
    db = FakeDatabase([job(JOB_A), job(JOB_B)])
    result = reconcile(db, [[line("1", JOB_A)], [line("1", JOB_A), line("2", JOB_B)]], **STOPPED)
    assert result["orphaned_jobs"] == []
    assert result["evidence"][JOBS]["with_slurm_job"] == 2


def test_only_the_job_that_got_no_slurm_job_by_the_second_listing_is_orphaned():
    db = FakeDatabase([job(JOB_A), job(JOB_B), job(JOB_C)])
    result = reconcile(db, [[line("1", JOB_A)], [line("1", JOB_A), line("2", JOB_B)]], **STOPPED)
    assert uuids(result["orphaned_jobs"]) == [JOB_C]
    assert result["evidence"][JOBS] == {
        "live": 3,
        "with_slurm_job": 2,
        "without_slurm_job": 1,
        "recently_modified": 0,
    }


def test_a_record_that_changed_before_the_reread_is_not_orphaned():
    db = FakeDatabase([job(JOB_A), job(JOB_B), job(JOB_C), container(CTR_A)])

    def change():
        db.rows[JOB_B] = job(JOB_B, "Failed")
        # Requeued and started again: another run of the job.
        db.rows[JOB_C] = job(JOB_C)._replace(started_at="2026-11-30T11:00:00")
        del db.rows[CTR_A]

    result = reconcile(
        db,
        [[line("1", JOB_A)], [line("1", JOB_A)]],
        between=change,
        kinds=(JOBS, CONTAINERS),
        orphans="always",
        **STOPPED,
    )
    assert result["orphaned_jobs"] == []
    assert result["orphaned_containers"] == []


def test_a_record_that_became_live_after_the_scan_is_not_a_candidate():
    db = FakeDatabase([job(JOB_A)])

    def start_another():
        db.rows[JOB_B] = job(JOB_B)

    result = reconcile(db, [[line("1", JOB_A)], [line("1", JOB_A)]], between=start_another, **STOPPED)
    assert result["orphaned_jobs"] == []


def test_without_evidence_orphans_are_withheld_per_kind():
    db = FakeDatabase([job(JOB_A), container(CTR_A), container(CTR_B)])
    queue = [line("1", CTR_A)]
    result = reconcile(db, [queue, queue], **STOPPED)
    assert result["orphaned_jobs"] == []
    assert result["orphans_withheld"][JOBS].startswith("Slurm shows no Slurm job for any of the 1 live jobs")
    assert uuids(result["orphaned_containers"]) == [CTR_B]
    assert result["orphans_withheld"][CONTAINERS] is None


def test_always_reports_orphans_when_slurm_shows_nothing_and_never_reports_none():
    db = FakeDatabase([job(JOB_A)])
    assert uuids(reconcile(db, [[], []], orphans="always", **STOPPED)["orphaned_jobs"]) == [JOB_A]
    never = reconcile(FakeDatabase([job(JOB_A), job(JOB_B)]), [[line("1", JOB_A)]] * 2, orphans="never", **STOPPED)
    assert never["orphaned_jobs"] == [] and never["orphans_withheld"][JOBS] == "orphans: never"


def test_nothing_live_withholds_nothing():
    result = reconcile(FakeDatabase([]), [[], []])
    assert result["orphans_withheld"] == {JOBS: None, CONTAINERS: None}


# -- polls, time, cost --------------------------------------------------------------------


def test_the_second_listing_starts_settle_seconds_after_the_first():
    clock = FakeClock()
    starts = []

    class TimedLister(ScriptedLister):
        def start(self):
            starts.append(clock.now())
            return super().start()

        def finish(self, output, prefix, kinds):
            clock.sleep(0.5)
            return super().finish(output, prefix, kinds)

    Reconciler(options(settle=7.0), FakeDatabase([job(JOB_A)]), TimedLister([[line("1", JOB_A)]] * 2), clock).run()
    assert starts == [1000.0, 1007.0]


def test_reads_are_set_based_whatever_the_number_of_records():
    rows = [job("%s-8i9sb-%015d" % (P, n)) for n in range(50)]
    db = FakeDatabase(rows)
    result = reconcile(db, [[line("1", rows[0].uuid)]] * 2, kinds=(JOBS,), batch_size=10000, **STOPPED)
    assert result["slurm"]["squeue_calls"] == 2
    # Whether a standby, one scan, one re-read of the candidates, one read of the names,
    # one look at the lock.
    assert db.statements == 5
    assert len(result["orphaned_jobs"]) == 49


def test_the_dispatcher_lock_is_reported():
    db = FakeDatabase([])
    db.holders = [{"pid": 42, "application_name": None, "client_addr": None, "backend_start": None}]
    assert reconcile(db, [[], []])["dispatcher"]["lock_held"] is True
    db.holders = []
    dispatcher = reconcile(db, [[], []])["dispatcher"]
    assert dispatcher["lock_held"] is False and dispatcher["lock_key"] == 10005
    assert dispatcher["lock_expected"] is None


@pytest.mark.parametrize(("release", "expected"), [((2, 4, 4), False), ((2, 5, 0), True), ((1, 4, 3), False)])
def test_the_release_says_whether_the_lock_is_expected(release, expected):
    # 2.5.0 lib/controller/dblock/dblock.go:24 adds the Dispatch lock; 2.4.4's has none.
    dispatcher = reconcile(FakeDatabase([]), [[], []], arvados_version=release)["dispatcher"]
    assert dispatcher["lock_expected"] is expected
    assert ("none is expected: dispatchers before Arvados 2.5" in dispatcher["reason"]) is not expected


# -- options and failures -----------------------------------------------------------------


@pytest.mark.parametrize(
    "params, message",
    [
        ({"settle": -1}, "option settle must be at least 0, got -1.0"),
        ({"settle": float("nan")}, "settle"),
        ({"command_timeout": 0}, "option command_timeout must be above 0, got 0.0"),
        ({"kinds": []}, "kinds must be a non-empty list"),
        ({"kinds": ["jobs", "tasks"]}, "option kinds must be one of jobs, containers, got 'tasks'"),
        ({"orphans": "maybe"}, "orphans must be one of evidence, always, never"),
        ({"cluster_prefix": "zz"}, "cluster_prefix"),
        ({"batch_size": 0}, "option batch_size must be at least 1, got 0"),
        (
            {"slurm_user": "a b"},
            "option slurm_user must be a Slurm user name ([A-Za-z0-9_.@-], not starting with @ or -), got 'a b'",
        ),
        (
            {"slurm_users": {"jobs": "a b"}},
            "option slurm_users.jobs must be a Slurm user name ([A-Za-z0-9_.@-], not starting with @ or -), got 'a b'",
        ),
        ({"slurm_users": {"tasks": "crunch"}}, "slurm_users: unknown kind(s) 'tasks'"),
        ({"slurm_users": ["crunch"]}, "option slurm_users must be of type dict, got ['crunch']"),
        (
            {"slurm_users": {"jobs": "crunch"}, "slurm_user": "root"},
            "slurm_user and slurm_users are mutually exclusive",
        ),
        (
            {"slurm_clusters": "a;b"},
            "option slurm_clusters must be Slurm cluster names ([A-Za-z0-9_.-]) separated by commas, got 'a;b'",
        ),
        ({"orphan_grace": -1}, "option orphan_grace must be at least 0, got -1.0"),
        ({"orphan_grace": float("inf")}, "orphan_grace"),
        ({"orphan_grace": 3601}, "option orphan_grace must be at most 3600, got 3601.0"),
        ({"crunch_v1_dispatcher": "maybe"}, "crunch_v1_dispatcher must be one of running, stopped, unknown"),
        ({"missing_are_stray": "yes"}, "option missing_are_stray must be of type bool, got 'yes'"),
        ({"allow_standby": 1}, "option allow_standby must be of type bool, got 1"),
        ({"arvados_version": "latest"}, "arvados_version: 'latest' is not an Arvados release such as 2.7.4"),
    ],
)
def test_bad_options_name_the_bad_value(params, message):
    with pytest.raises(ConfigError) as raised:
        ReconcileOptions.from_params(dict(params, squeue_path="/bin/true"))
    assert message in str(raised.value)


def test_defaults():
    opts = ReconcileOptions.from_params({"squeue_path": "/bin/true"})
    assert (opts.kinds, opts.settle, opts.orphans, opts.batch_size) == ((JOBS, CONTAINERS), 10.0, "evidence", 10000)


@pytest.mark.parametrize("given, release", [("2.7.4-1", (2, 7, 4)), ("3.2", (3, 2, 0)), ("", None), (None, None)])
def test_arvados_version_is_a_release_or_unset(given, release):
    opts = ReconcileOptions.from_params({"squeue_path": "/bin/true", "arvados_version": given})
    assert opts.arvados_version == release


class _Runner:
    def __init__(self, handle):
        self.handle = handle
        self.argv = None
        self.env = None

    def start(self, argv, env):
        self.argv, self.env = argv, env
        return self.handle


def test_squeue_failing_or_hanging_is_an_error_naming_why():
    down = _Runner(EndedCommand(1, stderr="squeue: error: Unable to contact slurm controller\n"))
    lister = SlurmLister(options(), down, {"SQUEUE_NAMES": "x", "PATH": "/bin"})
    with pytest.raises(RecoveryError, match="squeue failed \\(exit 1\\): squeue: error: Unable"):
        lister.finish(lister.start(), P, (JOBS,))
    assert "SQUEUE_NAMES" not in down.env and down.env["LC_ALL"] == "C"
    hung = _Runner(EndedCommand(None))
    with pytest.raises(RecoveryError, match="did not answer within 10 s"):
        hung_lister = SlurmLister(options(), hung, {})
        hung_lister.finish(hung_lister.start(), P, (JOBS,))
    assert hung.handle.killed


def test_each_listing_is_one_squeue_of_every_user_s_jobs_with_their_nodes():
    runner = _Runner(EndedCommand(0, stdout=line("9", JOB_A) + "\n"))
    lister = SlurmLister(options(squeue_path="/usr/bin/squeue"), runner, {})
    listing = lister.finish(lister.start(), P, (JOBS,))
    assert runner.argv == ["/usr/bin/squeue", "--noheader", "--all", "--array", "--format=%i|%T|%u|%N|%j"]
    assert listing.by_name == {JOB_A: [SlurmJob("9", "RUNNING", "crunch", "compute1", JOB_A)]}
    SlurmLister(options(slurm_clusters="east"), runner, {}).start()
    assert runner.argv[-1] == "--clusters=east"


def _read_of(entries):
    """A first read's entries, with their overdue ones counted, as _read_records keeps them."""
    return _Read(Candidates(), [], entries, sum(bool(entry.get("overdue")) for entry in entries))


def test_the_candidates_entries_are_found_by_identity_else_by_their_text():
    entries = [{"uuid": uuid} for uuid in (JOB_C, JOB_A, JOB_B)]
    # The search's own UUIDs: the same objects, in the same order, a few taken out.
    assert _drafts(_read_of(entries), dict.fromkeys([entries[0]["uuid"], entries[2]["uuid"]])).entries == [
        {"uuid": JOB_B},
        {"uuid": JOB_C},
    ]
    # Equal texts in other objects (or another order): each entry's UUID asked instead.
    copies = dict.fromkeys("".join(list(uuid)) for uuid in (JOB_B, JOB_C))
    assert _drafts(_read_of(entries), copies).entries == [{"uuid": JOB_B}, {"uuid": JOB_C}]
    assert _drafts(_read_of(entries), {}).entries == []


def test_the_drafts_count_their_overdue_entries_and_only_theirs():
    entries = [
        {"uuid": JOB_C, "overdue": True},
        {"uuid": JOB_A, "overdue": True},
        {"uuid": JOB_B, "overdue": False},
    ]
    # JOB_A was taken out (listed, say): its entry is neither reported nor counted.
    drafts = _drafts(_read_of(entries), dict.fromkeys([entries[0]["uuid"], entries[2]["uuid"]]))
    assert drafts == ([{"uuid": JOB_B, "overdue": False}, {"uuid": JOB_C, "overdue": True}], 1)
    # Found by their text, the same.
    copies = dict.fromkeys("".join(list(uuid)) for uuid in (JOB_C, JOB_B))
    assert _drafts(_read_of(entries), copies) == drafts
    # A container's entry has no "overdue": never counted.
    assert _drafts(_read_of([{"uuid": CTR_A}]), dict.fromkeys([CTR_A])).overdue == 0


def test_the_confirmed_orphans_come_by_uuid():
    db = FakeDatabase([job(JOB_C), job(JOB_A), job(JOB_B)])
    result = reconcile(db, [[], []], orphans="always", **STOPPED)
    assert uuids(result["orphaned_jobs"]) == [JOB_A, JOB_B, JOB_C]


def test_the_cycle_collector_is_off_during_a_run_and_back_on_after_it():
    seen = []

    class WatchedDatabase(FakeDatabase):
        def read_records(self, kind):
            seen.append(gc.isenabled())
            return super().read_records(kind)

    assert gc.isenabled()
    reconcile(WatchedDatabase([job(JOB_A)]), [[line("1", JOB_A)]] * 2)
    assert seen and not any(seen)
    assert gc.isenabled()


# -- issue 21: Arvados' own rules -----------------------------------------------------------


@pytest.mark.parametrize(
    "evidence, reason",
    [("running", "crunch-dispatch.rb runs and may retry it"), ("unknown", "no evidence whether crunch-dispatch.rb")],
)
def test_a_v1_job_without_a_slurm_job_awaits_the_retry_of_a_dispatcher_that_may_run(evidence, reason):
    # 1.4.3 services/api/lib/crunch_dispatch.rb, reap_children: after crunch-job exits 93
    # the job stays Running in @todo_job_retries, with no Slurm job and its row untouched.
    db = FakeDatabase([job(JOB_A), job(JOB_B)])
    result = reconcile(db, [[line("1", JOB_A)]] * 2, crunch_v1_dispatcher=evidence)
    assert result["orphaned_jobs"] == []
    assert uuids(result["jobs_awaiting_retry"]) == [JOB_B]
    entry = result["jobs_awaiting_retry"][0]
    assert reason in entry["reason"] and "exit 93" in entry["reason"]
    assert set(entry) == {"uuid", "state", "started_at", "is_locked_by_uuid", "reason", "age_seconds", "overdue"}
    assert (entry["age_seconds"], entry["overdue"]) == (600.0, False)
    assert result["counts"]["jobs_awaiting_retry"] == 1 and result["counts"]["orphaned_jobs"] == 0
    assert result["counts"]["jobs_retry_overdue"] == 0


@pytest.mark.parametrize("evidence", ["running", "unknown"])
def test_a_job_awaiting_retry_longer_than_the_bound_is_overdue_with_its_age(evidence):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:50: @todo_job_retries is in memory only; a
    # restarted crunch-dispatch.rb never retries the job. 3 retries x the 5-minute hold-off
    # for Node Manager (lines 15, 214-218): 900 s by default.
    db = FakeDatabase([job(JOB_A, age=899.9), job(JOB_B, age=900.5), job(JOB_C, age=None)])
    result = reconcile(db, [[], []], orphans="always", crunch_v1_dispatcher=evidence, retry_overdue_after=900.0)
    entries = {entry["uuid"]: entry for entry in result["jobs_awaiting_retry"]}
    assert {uuid: (entry["age_seconds"], entry["overdue"]) for uuid, entry in entries.items()} == {
        JOB_A: (899.9, False),
        JOB_B: (900.5, True),
        # No modified_at: nothing says how long it has waited.
        JOB_C: (None, False),
    }
    assert entries[JOB_B]["reason"].startswith(
        "awaiting crunch-dispatch.rb's retry for 900 s, longer than retry_overdue_after (900 s)"
    )
    assert "exit 93" in entries[JOB_B]["reason"] and "retry_overdue_after" not in entries[JOB_A]["reason"]
    assert result["counts"]["jobs_retry_overdue"] == 1 and result["retry_overdue_after"] == 900.0
    tighter = reconcile(db, [[], []], orphans="always", crunch_v1_dispatcher=evidence, retry_overdue_after=60.0)
    assert tighter["counts"]["jobs_retry_overdue"] == 2


def test_an_overdue_entry_is_made_whole_with_its_keys_in_the_report_s_order():
    # The entry is made as the row is read (orphan_entry_maker); its text and key order are
    # those the report had when age, overdue and the reason were added after the re-read.
    db = FakeDatabase([job(JOB_A, age=1250.46)])
    result = reconcile(db, [[], []], orphans="always", crunch_v1_dispatcher="running", settle=10.0)
    (entry,) = result["jobs_awaiting_retry"]
    assert list(entry) == ["uuid", "state", "started_at", "reason", "is_locked_by_uuid", "age_seconds", "overdue"]
    assert (entry["age_seconds"], entry["overdue"]) == (1250.5, True)
    assert entry["reason"] == (
        "awaiting crunch-dispatch.rb's retry for 1250 s, longer than retry_overdue_after (900 s): "
        "it retries a job it remembers as soon as a node is idle and gives up after 3 tries, but "
        "keeps the list in memory only, so after a restart it never retries it; make sure, then "
        "fail it (arvados_fail_jobs uuids); job is Running without a Slurm job in two listings 10 s "
        "apart, its row not updated, but crunch-dispatch.rb runs and may retry it: crunch-dispatch.rb "
        "keeps a job whose nodes failed (crunch-job exit 93) Running without a Slurm job until idle "
        "nodes return, then runs it again"
    )


def test_the_default_bound_is_three_retries_of_the_node_wait():
    opts = ReconcileOptions.from_params({"squeue_path": "/bin/true"})
    assert opts.retry_overdue_after == 900.0
    with pytest.raises(ConfigError, match="option retry_overdue_after must be at most 86400"):
        ReconcileOptions.from_params({"squeue_path": "/bin/true", "retry_overdue_after": 86401})
    with pytest.raises(ConfigError, match="option retry_overdue_after must be at least 0"):
        ReconcileOptions.from_params({"squeue_path": "/bin/true", "retry_overdue_after": -1})


def test_a_v1_job_without_a_slurm_job_is_orphaned_when_the_dispatcher_is_stopped():
    # 1.4.3 services/api/lib/crunch_dispatch.rb: only "this crunch-dispatch process" could
    # retry it; stopped, nothing will.
    db = FakeDatabase([job(JOB_A), job(JOB_B), container(CTR_A), container(CTR_B)])
    queue = [line("1", JOB_A), line("2", CTR_A)]
    stopped = reconcile(db, [queue, queue], crunch_v1_dispatcher="stopped")
    assert uuids(stopped["orphaned_jobs"]) == [JOB_B] and stopped["jobs_awaiting_retry"] == []
    assert stopped["orphaned_jobs"][0]["reason"].startswith("job is Running, but no Slurm job")
    # Containers are not crunch-dispatch.rb's: orphaned whatever it does.
    running = reconcile(db, [queue, queue], crunch_v1_dispatcher="running")
    assert uuids(running["orphaned_containers"]) == [CTR_B]


def test_withheld_orphans_withhold_the_jobs_awaiting_retry_too():
    result = reconcile(FakeDatabase([job(JOB_A)]), [[], []], crunch_v1_dispatcher="running")
    assert result["jobs_awaiting_retry"] == [] and result["orphans_withheld"][JOBS]


def test_only_a_locked_container_modified_within_the_grace_is_spared():
    # No Arvados rule spares orphans; the grace stands for crunch-dispatch-slurm's wait for
    # its next squeue poll between its lock and its sbatch (3.2.1
    # crunch-dispatch-slurm.go:269-273). A Running job or container had its Slurm job first.
    ctr_c = P + "-dz642-ccccccccccccccc"
    db = FakeDatabase(
        [
            job(JOB_A),
            job(JOB_B, recent=True, age=5.0),
            job(JOB_C),
            container(CTR_A),
            container(CTR_B, "Locked", recent=True),
            container(ctr_c, "Running", recent=True),
        ]
    )
    queue = [line("1", JOB_A), line("2", CTR_A)]
    result = reconcile(db, [queue, queue], crunch_v1_dispatcher="stopped")
    assert uuids(result["orphaned_jobs"]) == [JOB_B, JOB_C]
    assert uuids(result["orphaned_containers"]) == [ctr_c]
    assert result["evidence"][JOBS] == {"live": 3, "with_slurm_job": 1, "without_slurm_job": 2, "recently_modified": 0}
    assert result["evidence"][CONTAINERS]["recently_modified"] == 1


def test_a_recent_record_whose_slurm_job_comes_by_the_second_listing_is_evidence():
    db = FakeDatabase([container(CTR_A, "Locked", recent=True), container(CTR_B)])
    result = reconcile(db, [[], [line("1", CTR_A)]], kinds=[CONTAINERS])
    assert result["evidence"][CONTAINERS] == {
        "live": 2,
        "with_slurm_job": 1,
        "without_slurm_job": 1,
        "recently_modified": 0,
    }
    assert uuids(result["orphaned_containers"]) == [CTR_B]


def test_the_slurm_job_of_a_queued_container_is_stray():
    # 2.7.4 and 3.2.1 sdk/go/dispatch/dispatch.go (TrackContainer, checkListForUpdates: the
    # tracker closes on Queued) and services/crunch-dispatch-slurm/crunch-dispatch-slurm.go
    # (runContainer: a closed tracker cancels the Slurm job).
    db = FakeDatabase([container(CTR_A, "Queued"), container(CTR_B, "Locked")])
    queue = [line("1", CTR_A, state="PENDING", nodes=""), line("2", CTR_B)]
    result = reconcile(db, [queue, queue])
    assert [(entry["job_id"], entry["record_state"]) for entry in result["stray_slurm_jobs"]] == [("1", "Queued")]
    assert "tracker closes" in result["stray_slurm_jobs"][0]["reason"]


def test_a_uuid_missing_from_the_database_is_reported_not_stray_unless_asked():
    # 2.7.4 and 3.2.1 sdk/go/dispatch/dispatch.go, TrackContainer: the GET of an unknown
    # UUID fails and nothing is cancelled.
    db = FakeDatabase([container(CTR_A, "Cancelled")])
    queue = [line("1", CTR_A), line("2", CTR_B), line("3", JOB_C), line("4", JOB_B, state="COMPLETING")]
    default = reconcile(db, [queue, queue], missing_are_stray=False)
    assert [entry["name"] for entry in default["stray_slurm_jobs"]] == [CTR_A]
    assert sorted(entry["name"] for entry in default["missing_from_database"]) == [JOB_C, CTR_B]
    missing = {entry["name"]: entry for entry in default["missing_from_database"]}
    assert missing[CTR_B]["record_state"] is None and missing[CTR_B]["kind"] == "container"
    assert "no container of this UUID in the database" in missing[CTR_B]["reason"]
    # An ending Slurm job of a missing UUID is no ending stray.
    assert default["ending_slurm_jobs"] == 0
    assert default["counts"]["missing_from_database"] == 2 and default["counts"]["stray_slurm_jobs"] == 1

    asked = reconcile(db, [queue, queue], missing_are_stray=True)
    assert sorted(entry["name"] for entry in asked["stray_slurm_jobs"]) == [JOB_C, CTR_A, CTR_B]
    assert len(asked["missing_from_database"]) == 2
    assert asked["ending_slurm_jobs"] == 1


def test_a_standby_is_refused_naming_the_server_and_the_fix():
    db = FakeDatabase([job(JOB_A)])
    db.standby = True
    lister = ScriptedLister([[], []])
    with pytest.raises(RecoveryError) as raised:
        Reconciler(options(), db, lister, FakeClock(), "10.0.0.7:5432 (database arvados)").run()
    message = str(raised.value)
    assert "10.0.0.7:5432 (database arvados) is a standby" in message
    assert "point the database settings at the primary" in message and "allow_standby: true" in message
    # Refused before anything else is asked.
    assert lister.calls == 0 and db.statements == 1
    allowed = reconcile(db, [[], []], allow_standby=True)
    assert allowed["database_is_standby"] is True
    assert reconcile(FakeDatabase([]), [[], []])["database_is_standby"] is False


def test_no_lock_holder_does_not_say_that_no_dispatcher_runs():
    # 2.7.4 and 3.2.1 services/crunch-dispatch-slurm/crunch-dispatch-slurm.go,
    # lib/dispatchcloud/dispatcher.go, lib/lsf/dispatch.go: dblock.Dispatch.Lock once at
    # start, nothing calls Check(): after a PostgreSQL restart a running one holds no lock.
    dispatcher = reconcile(FakeDatabase([]), [[], []])["dispatcher"]
    assert dispatcher["lock_held"] is False and dispatcher["holders"] == []
    assert "no dispatcher" not in dispatcher["reason"]
    assert "cannot tell whether a dispatcher runs" in dispatcher["reason"]
    assert "service manager" in dispatcher["reason"]


def test_the_new_options_default_to_arvados_own_caution():
    opts = ReconcileOptions.from_params({"squeue_path": "/bin/true"})
    assert (opts.crunch_v1_dispatcher, opts.orphan_grace, opts.missing_are_stray, opts.allow_standby) == (
        "unknown",
        60.0,
        None,
        False,
    )
    assert (opts.missing_stray(JOBS), opts.missing_stray(CONTAINERS)) == (True, False)
    assert ReconcileOptions.from_params({"squeue_path": "/bin/true", "orphan_grace": 0}).orphan_grace == 0.0


# -- nodes down or drained, read beside the first squeue ---------------------------------------

SHOW_NODES = [
    FakeNode("c1", "DOWN", REBOOT_REASON),
    FakeNode("c2", "IDLE+DRAIN", "bad DIMM | ticket 12 [root@2026-12-03T09:00:00]"),
    FakeNode("c3", "IDLE"),
]


def node_lister(show_answer=None):
    scontrol = FakeScontrol(SHOW_NODES, show_answer=show_answer)
    return (
        NodeLister(options(report_nodes=True, scontrol_path="/usr/bin/scontrol"), scontrol, {"PATH": "/bin"}),
        scontrol,
    )


def test_nodes_down_or_drained_are_reported_with_their_reasons():
    nodes, scontrol = node_lister()
    result = Reconciler(options(), FakeDatabase([]), ScriptedLister([[], []]), FakeClock(), nodes=nodes).run()
    assert [(n["name"], n["state"], n["reason"], n["reason_is_unexpected_reboot"]) for n in result["slurm_nodes"]] == [
        ("c1", "down", "Node unexpectedly rebooted", True),
        ("c2", "drain", "bad DIMM | ticket 12", False),
    ]
    assert result["counts"]["slurm_nodes"] == 2
    assert result["slurm"]["scontrol_calls"] == 1 and result["slurm"]["squeue_calls"] == 2
    assert scontrol.calls == [["/usr/bin/scontrol", "--all", "show", "node"]] and scontrol.envs[0]["LC_ALL"] == "C"


def test_nodes_not_asked_for_are_not_read():
    result = reconcile(FakeDatabase([]), [[], []])
    assert result["slurm_nodes"] == [] and result["slurm"]["scontrol_calls"] == 0


def test_scontrol_failing_fails_the_run_rather_than_report_no_node_down():
    nodes = node_lister(EndedCommand(1, stderr="slurm_load_node error: Unable to contact slurm controller\n"))[0]
    with pytest.raises(RecoveryError, match="scontrol show node failed \\(exit 1\\): slurm_load_node"):
        Reconciler(options(), FakeDatabase([]), ScriptedLister([[], []]), FakeClock(), nodes=nodes).run()


# -- Locked orphans: their lock diagnosed -----------------------------------------------------


def test_each_locked_orphan_gets_its_lock_diagnosed_in_one_statement():
    ctr_c = P + "-dz642-ccccccccccccccc"
    theirs = P + "-gj3su-0123456789abcde"
    db = FakeDatabase([container(CTR_A, "Locked"), container(CTR_B, "Locked"), container(ctr_c), job(JOB_A)])
    db.rows[CTR_B] = db.rows[CTR_B]._replace(locked_by_uuid=theirs)
    db.locks = {
        CTR_A: LockToken(CTR_A, 3, False, None, None, False),
        CTR_B: LockToken(CTR_B, 10, True, P + "-tpzed-a", "2026-11-01T00:00:00", True),
    }
    queue = [line("1", JOB_A)]
    limit = DispatchLimit(10, "config_file /etc/arvados/config.yml, Clusters.zzzzz.Containers.MaxDispatchAttempts")
    result = Reconciler(
        options(orphans="always"), db, ScriptedLister([queue, queue]), FakeClock(), dispatch_limit=limit
    ).run()
    locks = {entry["uuid"]: entry.get("lock") for entry in result["orphaned_containers"]}
    assert locks[ctr_c] is None
    assert locks[CTR_A]["token"] == "system_root_token" and locks[CTR_A]["dispatch_attempts_left"] == 7
    assert locks[CTR_B]["token"] == "expired" and locks[CTR_B]["token_user_uuid"] == P + "-tpzed-a"
    assert db.lock_reads == [[CTR_A, CTR_B]]
    assert result["max_dispatch_attempts"] == {"value": 10, "source": limit.source}


def test_no_locked_orphan_no_lock_statement():
    db = FakeDatabase([container(CTR_A), container(CTR_B)])
    queue = [line("2", CTR_B)]
    result = reconcile(db, [queue, queue])
    assert uuids(result["orphaned_containers"]) == [CTR_A] and db.lock_reads == []
    assert result["max_dispatch_attempts"]["value"] is None


def test_the_locks_are_read_with_the_reread_for_every_locked_candidate_and_only_then():
    db = FakeDatabase([container(CTR_A, "Locked"), container(CTR_B, "Locked"), job(JOB_A)])
    db.locks = {CTR_B: LockToken(CTR_B, 1, True, P + "-tpzed-a", None, False)}
    # CTR_B's Slurm job comes between the listings: it drops out, its lock read for nothing.
    result = reconcile(db, [[line("1", JOB_A)], [line("1", JOB_A), line("2", CTR_B)]])
    assert db.lock_reads == [[CTR_A, CTR_B]]
    assert uuids(result["orphaned_containers"]) == [CTR_A]
    assert result["orphaned_containers"][0]["lock"]["lock_count"] is None
    never = FakeDatabase([container(CTR_A, "Locked"), job(JOB_A)])
    assert reconcile(never, [[], []], orphans="never")["orphaned_containers"] == [] and never.lock_reads == []


class _Canceled(Exception):
    def __init__(self, sqlstate):
        super().__init__("canceling statement due to statement timeout")
        self.sqlstate = sqlstate


class _LocksConnection:
    closed = broken = False

    def __init__(self, rows):
        self.rows, self.asked = rows, []

    def execute(self, query, params=None):
        self.asked.append(params)
        rows = self.rows

        class _Rows:
            def fetchall(self):
                return rows

        return _Rows()

    def rollback(self):
        pass


def test_a_read_stopped_by_query_timeout_names_the_option_the_table_and_its_holder():
    conn = _LocksConnection([("jobs", "AccessExclusiveLock", True, 41, "arvados", "psql")])
    message = reconcile_run.database_error_message(conn, _Canceled("57014"), 3.0, None)
    assert message == (
        "a read waited past query_timeout (3 s) for a table another session holds: pid 41 (user arvados, "
        "application psql) holds ACCESS EXCLUSIVE on jobs; nothing was changed. Try again when that session "
        "has finished, or raise query_timeout"
    )
    assert conn.asked == [{"tables": ["jobs", "containers", "users"], "modes": ["AccessExclusiveLock"]}]
    slow = reconcile_run.database_error_message(_LocksConnection([]), _Canceled("57014"), 3.0, None)
    assert slow.startswith("a read ran past query_timeout (3 s), nothing was changed: canceling statement")
    other = reconcile_run.database_error_message(_LocksConnection([]), _Canceled("42501"), 3.0, None)
    assert other.startswith("database error (nothing was changed): ")


# -- from the module's parameters: check_params, dispatch_limit, run_reconcile ----------------

NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "squeue_path": "/bin/true"}


def test_the_parameters_give_the_database_settings_and_the_checked_options():
    settings, opts = reconcile_run.check_params(dict(NO_FILES, db_host="db.example", settle=3, kinds=["containers"]))
    assert (settings.dbname, settings.host) == ("arvados_test", "db.example")
    assert (opts.settle, opts.kinds) == (3.0, (CONTAINERS,))
    with pytest.raises(ConfigError, match="option settle must be at least 0"):
        reconcile_run.check_params(dict(NO_FILES, settle=-1))


def cluster_config(tmp_path, containers):
    path = tmp_path / "config.yml"
    path.write_text(
        "Clusters:\n  zzzzz:\n    Containers:\n%s    PostgreSQL: {}\n"
        % "".join("      %s: %s\n" % item for item in containers.items())
    )
    return str(path)


def test_the_dispatch_limit_is_config_yml_s_else_the_release_s_default_else_unknown(tmp_path):
    told = {"config_file": cluster_config(tmp_path, {"MaxDispatchAttempts": 7})}
    assert reconcile_run.dispatch_limit(told, (2, 7, 4)) == DispatchLimit(
        7, "config_file %s, Clusters.zzzzz.Containers.MaxDispatchAttempts" % told["config_file"]
    )
    # A value that is no count is Arvados' default, as if config.yml did not set it.
    for containers in ({}, {"MaxDispatchAttempts": "many"}):
        silent = {"config_file": cluster_config(tmp_path, containers)}
        assert reconcile_run.dispatch_limit(silent, (2, 7, 4)) == DispatchLimit(10, "Arvados 2.7.4's default")
        assert reconcile_run.dispatch_limit(silent, (2, 6, 3)) == DispatchLimit(5, "Arvados 2.6.3's default")
        assert reconcile_run.dispatch_limit(silent, None) == UNKNOWN_LIMIT


class _RefusingConnection:
    """A connection whose every statement fails with the driver's error, quoting a secret."""

    closed = broken = False

    def __init__(self, error):
        self.error = error
        self.closes = 0

    def execute(self, statement, params=None):
        raise self.error

    def close(self):
        self.closes += 1


def test_a_run_checks_every_option_before_it_connects():
    def connect(*args, **kwargs):
        raise AssertionError("connected")

    with pytest.raises(ConfigError, match="option batch_size must be at least 1"):
        reconcile_run.run_reconcile(dict(NO_FILES, batch_size=0), connect_db=connect)


class _DriverError(Exception):
    """A driver's Error, whichever driver the Python running the tests has (or none)."""


def test_a_run_s_database_error_is_one_line_without_the_password_and_the_connection_closed(monkeypatch):
    driver = types.SimpleNamespace(Error=_DriverError)
    monkeypatch.setattr(reconcile_run, "load_driver", lambda: driver)
    conn = _RefusingConnection(driver.Error("permission denied for the password s3cret"))
    asked = []

    def connect(kwargs, wait, driver):
        asked.append((kwargs, wait))
        return conn

    params = dict(NO_FILES, db_password="s3cret", query_timeout=2.5, db_wait=4)
    with pytest.raises(RecoveryError) as raised:
        reconcile_run.run_reconcile(params, connect_db=connect, runner=_Runner(None), environ={})
    assert str(raised.value) == "database error (nothing was changed): permission denied for the password ********"
    assert conn.closes == 1
    ((kwargs, wait),) = asked
    assert (kwargs["dbname"], kwargs["options"], wait) == ("arvados_test", "-c statement_timeout=2500", 4.0)
