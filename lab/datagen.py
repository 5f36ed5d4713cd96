"""Fill an Arvados-shaped database with a realistic cluster.

Row generation (``ClusterGenerator``) is pure and streaming: it yields one
``Row`` at a time and keeps only per-running-job facts, so unit tests check
rows without a database and 1,000,000 jobs load in constant memory.
``load_cluster`` streams those rows into PostgreSQL with COPY (one
connection per table, all fed from the single pass) and, for large loads,
drops the indexes of ``schema/indexes.sql`` first and rebuilds them after.

The cluster:
- users: the system user ``<prefix>-tpzed-000000000000000``, users who run
  jobs and idle users who never do;
- finished jobs (Complete/Failed/Cancelled) with real portable data hashes,
  each with the dispatcher's token, expired when the job finished;
- Running jobs, most started before ``boot_time`` and some after it, each with
  the token the dispatcher made: ``api_client_id = 0``, no expiry, owned by the
  ``is_locked_by_uuid`` user, created between the job's ``created_at`` and
  ``started_at``.  Running jobs' windows never overlap, so every token belongs
  to at most one job;
- around each running job, tokens that a cleanup must never touch, each
  differing from the job's token in one respect (see ``DECOY_KINDS``);
- Queued jobs, and job tasks for every job that started.

Command line: ``python -m lab.datagen --help`` (connection from libpq's PG*
variables, e.g. after ``eval "$(lab/labctl.py env)"``, or ``--dsn``).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import multiprocessing
import os
import random
import re
import resource
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    # "python -m lab.datagen" from another directory still finds the shared code.
    sys.path.insert(0, str(REPO_ROOT))

from plugins.module_utils import uuids  # noqa: E402
from plugins.module_utils.fail_jobs import table_columns  # noqa: E402

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
TABLES_SQL = SCHEMA_DIR / "tables.sql"
INDEXES_SQL = SCHEMA_DIR / "indexes.sql"
# The same tables as Arvados had them in 2017 (integer ids, fewer columns,
# a to_tsvector text-search index on jobs): see schema/README.md.
SCHEMA_2017_DIR = SCHEMA_DIR / "2017"
TABLES_2017_SQL = SCHEMA_2017_DIR / "tables.sql"
INDEXES_2017_SQL = SCHEMA_2017_DIR / "indexes.sql"
SCHEMA_INDEXES = {"current": INDEXES_SQL, "2017": INDEXES_2017_SQL}

DEFER_INDEXES_FROM_JOBS = 50_000
FINISHED_BLOCK_JOBS = 20_000
# Decoy uuids are kept for tests; past this many per kind only counted.
MAX_RECORDED_DECOYS_PER_KIND = 1000

EPOCH = datetime(1970, 1, 1)
API_CLIENT_INFIX = "ozdt8"

JOB_TOKEN = "job"
UNSTARTED_JOB_TOKEN = "job_unstarted"
FINISHED_JOB_TOKEN = "finished_job"
OTHER_USER_TOKEN = "other_user"
API_CLIENT_TOKEN = "api_client"
EXPIRED_TOKEN = "expired"
CONTAINER_TOKEN = "container"
OUTSIDE_WINDOW_TOKEN = "outside_window"
# Each decoy matches a running job's token in every respect but one:
DECOY_KINDS = (
    OTHER_USER_TOKEN,  # its user runs no job
    API_CLIENT_TOKEN,  # api_client_id != 0
    EXPIRED_TOKEN,  # expires_at already past
    CONTAINER_TOKEN,  # named by containers.auth_uuid
    OUTSIDE_WINDOW_TOKEN,  # created before the job was
)

FINISHED_STATES = ("Complete", "Failed", "Cancelled")
FINISHED_STATE_WEIGHTS = (80, 15, 5)
SCRIPTS = ("bwa-mem", "gatk-haplotypecaller", "run-command", "hash", "samtools-sort")

USERS_COLUMNS = (
    "id", "uuid", "owner_uuid", "created_at", "modified_by_client_uuid",
    "modified_by_user_uuid", "modified_at", "email", "first_name", "last_name",
    "identity_url", "is_admin", "prefs", "updated_at", "default_owner_uuid",
    "is_active", "username",
)
JOBS_COLUMNS = (
    "id", "uuid", "owner_uuid", "modified_by_client_uuid", "modified_by_user_uuid",
    "modified_at", "submit_id", "script", "script_version", "script_parameters",
    "cancelled_by_client_uuid", "cancelled_by_user_uuid", "cancelled_at",
    "started_at", "finished_at", "running", "success", "output", "created_at",
    "updated_at", "is_locked_by_uuid", "log", "tasks_summary", "runtime_constraints",
    "nondeterministic", "repository", "supplied_script_version",
    "docker_image_locator", "priority", "description", "state",
    "arvados_sdk_version", "components", "script_parameters_digest",
)
JOB_TASKS_COLUMNS = (
    "id", "uuid", "owner_uuid", "modified_by_client_uuid", "modified_by_user_uuid",
    "modified_at", "job_uuid", "sequence", "parameters", "output", "progress",
    "success", "created_at", "updated_at", "created_by_job_task_uuid", "qsequence",
    "started_at", "finished_at",
)
TOKENS_COLUMNS = (
    "id", "api_token", "api_client_id", "user_id", "created_by_ip_address",
    "last_used_by_ip_address", "last_used_at", "expires_at", "created_at",
    "updated_at", "default_owner_uuid", "scopes", "uuid",
)
CONTAINERS_COLUMNS = (
    "id", "uuid", "owner_uuid", "created_at", "modified_at", "modified_by_client_uuid",
    "modified_by_user_uuid", "state", "started_at", "finished_at", "environment",
    "cwd", "command", "output_path", "mounts", "runtime_constraints",
    "container_image", "priority", "updated_at", "auth_uuid", "locked_by_uuid",
    "runtime_user_uuid",
)
COLUMNS = {
    "users": USERS_COLUMNS,
    "jobs": JOBS_COLUMNS,
    "job_tasks": JOB_TASKS_COLUMNS,
    "api_client_authorizations": TOKENS_COLUMNS,
    "containers": CONTAINERS_COLUMNS,
}
# Tables the generator fills plus logs, which a cleanup writes to.
CLUSTER_TABLES = ("users", "jobs", "job_tasks", "api_client_authorizations", "containers", "logs")


class Row(NamedTuple):
    table: str
    values: tuple
    kind: Optional[str]  # job state, or token kind; None for other tables

    def as_dict(self) -> dict:
        return dict(zip(COLUMNS[self.table], self.values))


@dataclass(frozen=True)
class ClusterSpec:
    """What to generate. Times are naive UTC, as Arvados stores them."""

    boot_time: datetime
    now: datetime
    prefix: str = "zzzzz"
    jobs: int = 200
    running: int = 20
    queued: int = 10
    running_after_boot: int = 1
    running_unstarted: int = 0
    tasks_per_job: int = 2
    users: int = 10
    idle_users: int = 2
    seed: int = 0
    running_span: timedelta = timedelta(days=7)
    history: timedelta = timedelta(days=365)
    decoys: bool = True
    finished_job_tokens: bool = True

    def validate(self) -> None:
        uuids.check_prefix(self.prefix)
        counts = {
            "jobs": self.jobs, "running": self.running, "queued": self.queued,
            "running_after_boot": self.running_after_boot,
            "running_unstarted": self.running_unstarted,
            "tasks_per_job": self.tasks_per_job, "users": self.users,
            "idle_users": self.idle_users,
        }
        negative = [name for name, value in counts.items() if value < 0]
        if negative:
            raise ValueError("counts must not be negative: %s" % ", ".join(negative))
        if self.running + self.queued > self.jobs:
            raise ValueError("running + queued (%d) exceeds jobs (%d)"
                             % (self.running + self.queued, self.jobs))
        if self.running_after_boot + self.running_unstarted > self.running:
            raise ValueError("running_after_boot + running_unstarted exceeds running")
        if self.users - self.idle_users < 1:
            raise ValueError("need at least one user who runs jobs (users > idle_users)")
        if self.decoys and self.running and self.idle_users < 1:
            raise ValueError("decoy tokens need at least one idle user (idle_users >= 1)")
        if not self.now > self.boot_time:
            raise ValueError("boot_time must be before now")
        if self.running_after_boot and self.now - self.boot_time < timedelta(seconds=2):
            raise ValueError("no time between boot_time and now for jobs started after boot")
        if self.running_span <= timedelta(0) or self.history <= timedelta(0):
            raise ValueError("running_span and history must be positive")


@dataclass
class Summary:
    prefix: str
    seed: int
    boot_time: datetime
    rows: Counter = field(default_factory=Counter)
    jobs_by_state: Counter = field(default_factory=Counter)
    tokens_by_kind: Counter = field(default_factory=Counter)
    running_before_boot: List[str] = field(default_factory=list)
    running_after_boot: List[str] = field(default_factory=list)
    running_unstarted: List[str] = field(default_factory=list)
    # running job uuid -> uuid of the token the dispatcher made for it
    job_token_uuids: Dict[str, str] = field(default_factory=dict)
    decoy_token_uuids: Dict[str, List[str]] = field(default_factory=dict)
    slurm_jobs: Dict[str, str] = field(default_factory=dict)  # job uuid -> Slurm job id

    @property
    def running_uuids(self) -> List[str]:
        return self.running_before_boot + self.running_unstarted + self.running_after_boot

    def to_dict(self, max_uuids: Optional[int] = None) -> dict:
        def cap(items):
            return list(items) if max_uuids is None else list(items)[:max_uuids]

        return {
            "prefix": self.prefix,
            "seed": self.seed,
            "boot_time": self.boot_time.isoformat() + "Z",
            "rows": dict(self.rows),
            "jobs_by_state": dict(self.jobs_by_state),
            "tokens_by_kind": dict(self.tokens_by_kind),
            "running_before_boot": cap(self.running_before_boot),
            "running_after_boot": cap(self.running_after_boot),
            "running_unstarted": cap(self.running_unstarted),
            "slurm_jobs": dict(self.slurm_jobs),
        }


def portable_data_hash(manifest_text: str) -> str:
    """Arvados' content address of a collection: ``<md5 of manifest>+<length>``."""
    data = manifest_text.encode("utf-8")
    return "%s+%d" % (hashlib.md5(data).hexdigest(), len(data))


def manifest_for(owner_uuid: str, file_name: str, size: int) -> str:
    """A one-file manifest whose block locator is a real md5 (of a name)."""
    block = hashlib.md5(("%s/%s" % (owner_uuid, file_name)).encode()).hexdigest()
    return ". %s+%d 0:%d:%s\n" % (block, size, size, file_name)


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def _seconds(moment: datetime) -> float:
    return (moment - EPOCH).total_seconds()


def tasks_summary(done: int, running: int, todo: int, failed: int = 0) -> str:
    return json.dumps({"failed": failed, "todo": todo, "running": running, "done": done},
                      separators=(",", ":"))


@dataclass(frozen=True)
class _User:
    id: int
    uuid: str


@dataclass(frozen=True)
class _JobPlan:
    uuid: str
    state: str
    owner_uuid: str
    user: _User  # is_locked_by_uuid, whose token runs the job
    created: float
    started: Optional[float]
    finished: Optional[float]
    horizon: float  # tasks start and finish before this moment


class ClusterGenerator:
    """The cluster as a stream of rows; ``summary`` fills as rows are consumed.

    ``rows()`` = ``user_rows()`` + ``finished_rows()`` + ``active_rows()``.
    Finished jobs come in blocks of ``FINISHED_BLOCK_JOBS``, each with its own
    random stream and fixed id ranges, so that processes can generate blocks
    in parallel and the data still depends on the seed alone.
    """

    def __init__(self, spec: ClusterSpec):
        spec.validate()
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.summary = Summary(prefix=spec.prefix, seed=spec.seed, boot_time=spec.boot_time)
        self._client_uuid = uuids.new_uuid(spec.prefix, API_CLIENT_INFIX, self.rng)
        self._dispatcher_token_uuid = self._uuid(self.rng, uuids.TOKEN_INFIX)
        self._system_user = _User(1, uuids.system_user_uuid(spec.prefix))
        self._runners: List[_User] = []
        self._idle: List[_User] = []
        self._user_rows = list(self._make_users())
        self._projects = [self._uuid(self.rng, uuids.GROUP_INFIX) for _ in range(3)]
        self._docker_images = [
            portable_data_hash(manifest_for("docker", "image%d.tar" % i, 10 ** 9 + i))
            for i in range(3)
        ]
        self.finished_jobs = spec.jobs - spec.running - spec.queued
        boot = _seconds(spec.boot_time)
        self._running_region = (boot - 1.0 - spec.running_span.total_seconds(), boot - 1.0)
        self._finished_region = (self._running_region[0] - spec.history.total_seconds(),
                                 self._running_region[0])
        # The active jobs' ids follow the finished jobs' fixed ranges.
        tasks = spec.tasks_per_job
        self._next_id = Counter(
            users=len(self._user_rows), jobs=self.finished_jobs,
            job_tasks=self.finished_jobs * tasks,
            api_client_authorizations=self.finished_jobs if spec.finished_job_tokens else 0)
        self._qsequence = self.finished_jobs * tasks

    @property
    def finished_blocks(self) -> int:
        return -(-self.finished_jobs // FINISHED_BLOCK_JOBS)

    # -- helpers --------------------------------------------------------
    def _uuid(self, rng: random.Random, infix: str) -> str:
        return uuids.new_uuid(self.spec.prefix, infix, rng)

    def _id(self, table: str) -> int:
        self._next_id[table] += 1
        return self._next_id[table]

    def _row(self, table: str, values: tuple, kind: Optional[str] = None) -> Row:
        self.summary.rows[table] += 1
        if table == "jobs":
            self.summary.jobs_by_state[kind] += 1
        elif table == "api_client_authorizations":
            self.summary.tokens_by_kind[kind] += 1
        return Row(table, values, kind)

    def _pick_owner(self, rng: random.Random, user: _User) -> str:
        # A third of the jobs belong to a project, not to the user running them.
        return rng.choice(self._projects) if rng.random() < 0.33 else user.uuid

    # -- the stream ------------------------------------------------------
    def rows(self) -> Iterator[Row]:
        yield from self.user_rows()
        yield from self.finished_rows()
        yield from self.active_rows()

    def user_rows(self) -> Iterator[Row]:
        for row in self._user_rows:
            yield self._row("users", row)

    def finished_rows(self, blocks: Optional[Sequence[int]] = None) -> Iterator[Row]:
        for block in (range(self.finished_blocks) if blocks is None else blocks):
            yield from self._finished_block(block)

    def active_rows(self) -> Iterator[Row]:
        """Running jobs (before boot, without started_at, after boot), then Queued."""
        spec = self.spec
        boot = _seconds(spec.boot_time)
        now = _seconds(spec.now)
        before_boot = spec.running - spec.running_after_boot - spec.running_unstarted
        slots = self._slots(before_boot + spec.running_unstarted, *self._running_region)
        for index, (start, width) in enumerate(slots):
            yield from self._running_job(start, width, started=index < before_boot)
        for start, width in self._slots(spec.running_after_boot, boot + 0.5, now - 0.5):
            yield from self._running_job(start, width, started=True, horizon=now)
        yield from self._queued_jobs(spec.queued, max(boot, now - 3600.0), now)

    @staticmethod
    def _slots(count: int, start: float, end: float) -> Iterator[Tuple[float, float]]:
        """``count`` disjoint, consecutive time slots covering [start, end)."""
        if count <= 0:
            return
        width = (end - start) / count
        for index in range(count):
            yield start + index * width, width

    def _make_users(self) -> Iterator[tuple]:
        spec = self.spec
        start = _seconds(spec.boot_time) - spec.running_span.total_seconds() \
            - spec.history.total_seconds() - 86400.0
        yield self._user_values(self._system_user, start, "root", is_admin=True)
        for number in range(1, spec.users + 1):
            user = _User(1 + number, self._uuid(self.rng, uuids.USER_INFIX))
            (self._idle if number > spec.users - spec.idle_users else self._runners).append(user)
            yield self._user_values(user, start + number, "user%d" % number, is_admin=False)

    def _user_values(self, user: _User, created: float, username: str, is_admin: bool) -> tuple:
        at = _at(created)
        system_uuid = self._system_user.uuid
        return (
            user.id, user.uuid, system_uuid, at, self._client_uuid, system_uuid, at,
            "%s@example.com" % username, username.capitalize(), "Lab",
            "https://login.example.com/%s" % username, is_admin, "{}", at, None, True,
            username,
        )

    # -- finished jobs ---------------------------------------------------
    def _finished_block(self, block: int) -> Iterator[Row]:
        spec = self.spec
        rng = random.Random("%d/finished/%d" % (spec.seed, block))
        tasks = spec.tasks_per_job
        start, end = self._finished_region
        width = (end - start) / max(self.finished_jobs, 1)
        first = block * FINISHED_BLOCK_JOBS
        for index in range(first, min(first + FINISHED_BLOCK_JOBS, self.finished_jobs)):
            state = rng.choices(FINISHED_STATES, FINISHED_STATE_WEIGHTS)[0]
            user = rng.choice(self._runners)
            created = start + index * width + rng.random() * width * 0.5
            started = created + rng.uniform(1.0, 120.0)
            finished = started + min(rng.expovariate(1 / 1800.0), 7 * 86400.0) + 1.0
            plan = _JobPlan(self._uuid(rng, uuids.JOB_INFIX), state,
                            self._pick_owner(rng, user), user, created, started, finished,
                            finished)
            done = tasks if state == "Complete" else rng.randint(0, tasks)
            yield self._job_row(rng, index + 1, plan, done=done, running=0)
            yield from self._task_rows(rng, index * tasks, index * tasks, plan, done, 0)
            if spec.finished_job_tokens:
                yield self._token_row(rng, index + 1, FINISHED_JOB_TOKEN, user,
                                      rng.uniform(created, started), expires=finished,
                                      last_used=finished)

    # -- running and queued jobs ----------------------------------------
    def _running_job(self, slot_start: float, width: float, started: bool,
                     horizon: Optional[float] = None) -> Iterator[Row]:
        rng = self.rng
        user = rng.choice(self._runners)
        start_time = slot_start + 0.7 * width if started else None
        plan = _JobPlan(self._uuid(rng, uuids.JOB_INFIX), "Running", self._pick_owner(rng, user),
                        user, slot_start + 0.3 * width, start_time, None,
                        horizon if horizon is not None else _seconds(self.spec.boot_time))
        if not started:
            self.summary.running_unstarted.append(plan.uuid)
        elif horizon is None:
            self.summary.running_before_boot.append(plan.uuid)
        else:
            self.summary.running_after_boot.append(plan.uuid)
        tasks = self.spec.tasks_per_job
        done = rng.randint(0, max(tasks - 1, 0)) if started else 0
        running = min(tasks - done, 1) if started else 0
        yield self._job_row(rng, self._id("jobs"), plan, done=done, running=running)
        if started:
            first_id = self._next_id["job_tasks"]
            self._next_id["job_tasks"] += tasks
            self._qsequence += tasks
            yield from self._task_rows(rng, first_id, self._qsequence - tasks, plan, done,
                                       running)
        window_end = start_time if started else slot_start + 0.7 * width
        kind = JOB_TOKEN if started else UNSTARTED_JOB_TOKEN
        token = self._token_row(rng, self._id("api_client_authorizations"), kind, plan.user,
                                rng.uniform(plan.created, window_end), last_used=window_end)
        self.summary.job_token_uuids[plan.uuid] = token.values[-1]
        yield token
        if self.spec.decoys and started:
            yield from self._decoys(plan, slot_start)

    def _decoys(self, plan: _JobPlan, slot_start: float) -> Iterator[Row]:
        rng = self.rng
        assert plan.started is not None

        def inside() -> float:
            return rng.uniform(plan.created, plan.started)

        def token(kind: str, user: _User, created: float, **extra) -> Row:
            row = self._token_row(rng, self._id("api_client_authorizations"), kind, user,
                                  created, **extra)
            recorded = self.summary.decoy_token_uuids.setdefault(kind, [])
            if len(recorded) < MAX_RECORDED_DECOYS_PER_KIND:
                recorded.append(row.values[-1])
            return row

        yield token(OTHER_USER_TOKEN, rng.choice(self._idle), inside())
        yield token(API_CLIENT_TOKEN, plan.user, inside(), api_client_id=1)
        yield token(EXPIRED_TOKEN, plan.user, inside(),
                    expires=_seconds(self.spec.now) - rng.uniform(60.0, 3600.0))
        container_token = token(CONTAINER_TOKEN, plan.user, inside())
        yield container_token
        yield self._container_row(plan, container_token.values[-1])
        # Between the previous slot's window and this job's creation: outside
        # every running job's window.
        yield token(OUTSIDE_WINDOW_TOKEN, plan.user, rng.uniform(slot_start, plan.created))

    def _queued_jobs(self, count: int, start: float, end: float) -> Iterator[Row]:
        rng = self.rng
        for slot_start, width in self._slots(count, start, end):
            user = rng.choice(self._runners)
            plan = _JobPlan(self._uuid(rng, uuids.JOB_INFIX), "Queued",
                            self._pick_owner(rng, user), user,
                            slot_start + rng.random() * width, None, None, end)
            yield self._job_row(rng, self._id("jobs"), plan, done=0, running=0)

    # -- rows ------------------------------------------------------------
    def _job_row(self, rng: random.Random, job_id: int, plan: _JobPlan, done: int,
                 running: int) -> Row:
        state = plan.state
        input_pdh = portable_data_hash(manifest_for(plan.uuid, "input.fastq",
                                                    rng.randint(1, 10 ** 9)))
        parameters = '{"input":"%s","threads":%d}' % (input_pdh, rng.choice((1, 4, 8, 16)))
        finished = state in FINISHED_STATES
        log = output = None
        if finished:
            log = portable_data_hash(manifest_for(plan.uuid, "%s.log.txt" % plan.uuid,
                                                  rng.randint(100, 10 ** 7)))
            if state == "Complete":
                output = portable_data_hash(manifest_for(plan.uuid, "output.bam",
                                                         rng.randint(1, 10 ** 10)))
        tasks = self.spec.tasks_per_job
        failed_tasks = 1 if state == "Failed" and done < tasks else 0
        summary_text = None if state == "Queued" else tasks_summary(
            done, running, tasks - done - running - failed_tasks, failed_tasks)
        modified = _at(plan.finished or plan.started or plan.created)
        cancelled = state == "Cancelled"
        user_uuid = plan.user.uuid
        return self._row("jobs", (
            job_id, plan.uuid, plan.owner_uuid, self._client_uuid, user_uuid, modified, None,
            rng.choice(SCRIPTS), "%040x" % rng.getrandbits(160), parameters,
            self._client_uuid if cancelled else None, user_uuid if cancelled else None,
            modified if cancelled else None,
            _at(plan.started) if plan.started is not None else None,
            modified if finished else None,
            state == "Running",
            True if state == "Complete" else (False if finished else None),
            output, _at(plan.created), modified,
            user_uuid if state != "Queued" else None, log, summary_text,
            '{"min_nodes":1,"max_tasks_per_node":%d}' % rng.choice((1, 2, 4)),
            False, "arvados", "master", rng.choice(self._docker_images),
            rng.choice((0, 1, 100)), None, state, "%040x" % rng.getrandbits(160), None,
            hashlib.md5(parameters.encode()).hexdigest(),
        ), kind=state)

    def _task_rows(self, rng: random.Random, first_id: int, first_qsequence: int,
                   plan: _JobPlan, done: int, running: int) -> Iterator[Row]:
        """Task ``n`` has id ``first_id + n + 1``: fixed ranges, no shared counter."""
        assert plan.started is not None
        tasks = self.spec.tasks_per_job
        step = (plan.horizon - plan.started) / (2.0 * (tasks + 1))
        job_started = _at(plan.started)
        first_uuid = None
        for number in range(tasks):
            uuid = self._uuid(rng, uuids.JOB_TASK_INFIX)
            started = finished = success = output = None
            progress = 0.0
            if number < done + running or (number == done and plan.state == "Failed"):
                started = plan.started + step * (number + 1)
            if number < done:
                finished = started + step * rng.random()
                success = True
                progress = 1.0
                # crunch v1 tasks keep their output as manifest text
                output = manifest_for(uuid, "part%d" % number, 1000 + number)
            elif number == done and plan.state == "Failed":
                finished = plan.finished
                success = False
            elif number < done + running:
                progress = round(rng.random(), 3)
            started_at = _at(started) if started is not None else None
            finished_at = _at(finished) if finished is not None else None
            modified = finished_at or started_at or job_started
            yield self._row("job_tasks", (
                first_id + number + 1, uuid, plan.owner_uuid, self._client_uuid,
                plan.user.uuid, modified, plan.uuid, 0 if number == 0 else 1,
                '{"input":"%s/part%d"}' % (plan.uuid, number), output, progress, success,
                job_started, modified, first_uuid, first_qsequence + number + 1,
                started_at, finished_at,
            ))
            if first_uuid is None:
                first_uuid = uuid

    def _token_row(self, rng: random.Random, token_id: int, kind: str, user: _User,
                   created: float, expires: Optional[float] = None,
                   last_used: Optional[float] = None, api_client_id: int = 0) -> Row:
        created_at = _at(created)
        expires_at = _at(expires) if expires is not None else None
        return self._row("api_client_authorizations", (
            token_id, "".join(rng.choices(uuids.ALPHABET, k=50)), api_client_id, user.id,
            "10.0.0.1", "10.0.0.1" if last_used is not None else None,
            _at(last_used) if last_used is not None else None, expires_at, created_at,
            expires_at if expires is not None and expires > created else created_at,
            None, '["all"]', self._uuid(rng, uuids.TOKEN_INFIX),
        ), kind=kind)

    def _container_row(self, plan: _JobPlan, auth_uuid: str) -> Row:
        assert plan.started is not None
        created = _at(plan.created)
        started = _at(plan.started)
        return self._row("containers", (
            self._id("containers"), self._uuid(self.rng, uuids.CONTAINER_INFIX),
            self._system_user.uuid, created, started, self._client_uuid, self._system_user.uuid,
            "Running", started, None, "{}", "/var/spool/cwl", '["sleep","3600"]',
            "/var/spool/cwl", "{}", '{"ram":1073741824,"vcpus":1}', self._docker_images[0], 1,
            started, auth_uuid, self._dispatcher_token_uuid, plan.user.uuid,
        ))


# ---------------------------------------------------------------------------
# Boot time
# ---------------------------------------------------------------------------

def host_boot_time(proc_stat: str = "/proc/stat") -> datetime:
    """This host's boot time (``btime``), naive UTC."""
    with open(proc_stat, encoding="ascii") as handle:
        for line in handle:
            if line.startswith("btime "):
                booted = datetime.fromtimestamp(int(line.split()[1]), timezone.utc)
                return booted.replace(tzinfo=None)
    raise ValueError("no btime line in %s" % proc_stat)


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_time(text: str) -> datetime:
    """``btime`` (this host's boot), ``@<epoch>``, or ISO 8601 (no zone = UTC)."""
    if text == "btime":
        return host_boot_time()
    if text.startswith("@"):
        return datetime.fromtimestamp(float(text[1:]), timezone.utc).replace(tzinfo=None)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


# ---------------------------------------------------------------------------
# Indexes
# ---------------------------------------------------------------------------

_INDEX_RE = re.compile(r"^CREATE (?:UNIQUE )?INDEX (\w+) ON public\.(\w+) ", re.MULTILINE)


class IndexDefinition(NamedTuple):
    name: str
    table: str
    statement: str


def index_definitions(path: Path = INDEXES_SQL) -> List[IndexDefinition]:
    """The CREATE INDEX statements of ``indexes.sql``, in file order."""
    definitions = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _INDEX_RE.match(line)
        if match:
            definitions.append(IndexDefinition(match.group(1), match.group(2), line.rstrip(";")))
    return definitions


def _rebuild_order(definitions: Sequence[IndexDefinition]) -> List[IndexDefinition]:
    # GIN indexes take longest: start them first so the other worker builds
    # the btrees meanwhile.
    return sorted(definitions, key=lambda d: ("USING gin" not in d.statement,
                                               d.table != "jobs"))


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

@dataclass
class LoadTimings:
    drop_indexes: float = 0.0
    copy: float = 0.0
    index: float = 0.0
    analyze: float = 0.0
    total: float = 0.0
    deferred_indexes: bool = False


def _connect(conninfo: str):
    import psycopg  # the lab's only third-party need; unit tests never import it

    return psycopg.connect(conninfo)


def _existing_rows(conn) -> Dict[str, int]:
    from psycopg import sql

    counts = {}
    with conn.cursor() as cur:
        for table in CLUSTER_TABLES:
            cur.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT 1) AS t")
                        .format(sql.Identifier(table)))
            counts[table] = cur.fetchone()[0]
    return counts


def _prepare_tables(conn, replace: bool) -> None:
    from psycopg import sql

    if replace:
        conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
            sql.SQL(", ").join(sql.Identifier(t) for t in CLUSTER_TABLES)))
        conn.commit()
        return
    busy = [table for table, count in _existing_rows(conn).items() if count]
    conn.rollback()
    if busy:
        raise RuntimeError("tables already hold rows: %s (use replace=True / --replace)"
                           % ", ".join(busy))


def copy_columns(conn) -> Dict[str, Tuple[str, ...]]:
    """Per generated table, the columns of ``COLUMNS`` that the target table has.

    Read once per load. Today's schema has every one of them; an older one
    (schema/2017) lacks some, and the generator's values for those are left
    out of the COPY.
    """
    present = table_columns(conn, COLUMNS)
    conn.rollback()
    missing = [table for table in COLUMNS if table not in present]
    if missing:
        raise RuntimeError("the database has no table %s" % ", ".join(missing))
    return {table: tuple(c for c in columns if c in present[table])
            for table, columns in COLUMNS.items()}


def _check_index_definitions(conn, definitions: Sequence[IndexDefinition]) -> None:
    """Refuse to defer indexes with a file that would not rebuild the target's own.

    Every secondary index the cluster tables have must be one the file
    creates again (those it lacks are created); else the wrong schema's
    indexes.sql was given, e.g. today's for a 2017 database.
    """
    rows = conn.execute(
        "SELECT ic.relname FROM pg_index i"
        " JOIN pg_class ic ON ic.oid = i.indexrelid"
        " JOIN pg_class t ON t.oid = i.indrelid"
        " JOIN pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = 'public' AND t.relname = ANY(%s)"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        (list(CLUSTER_TABLES),)).fetchall()
    conn.rollback()
    unknown = sorted({name for (name,) in rows} - {d.name for d in definitions})
    if unknown:
        listed = ", ".join(unknown[:5]) + (
            " (+%d more)" % (len(unknown) - 5) if len(unknown) > 5 else "")
        raise RuntimeError(
            "the indexes file does not define this database's indexes %s: is it the "
            "other schema's (indexes_sql=INDEXES_2017_SQL / --schema 2017)?" % listed)


def drop_indexes(conn, definitions: Sequence[IndexDefinition]) -> None:
    from psycopg import sql

    for definition in definitions:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS public.{}").format(
            sql.Identifier(definition.name)))
    conn.commit()


def create_indexes(conninfo: str, definitions: Sequence[IndexDefinition], workers: int = 2,
                   maintenance_work_mem: str = "256MB") -> None:
    """Run the CREATE INDEX statements on ``workers`` connections at once."""
    pending = list(_rebuild_order(definitions))
    lock = threading.Lock()
    errors: List[BaseException] = []

    def next_definition() -> Optional[IndexDefinition]:
        with lock:
            return pending.pop(0) if pending and not errors else None

    def worker() -> None:
        try:
            with _connect(conninfo) as conn:
                conn.autocommit = True
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)",
                              (maintenance_work_mem,))
                definition = next_definition()
                while definition is not None:
                    conn.execute(definition.statement)
                    definition = next_definition()
        except BaseException as error:  # reported by the caller's thread
            with lock:
                errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(max(1, workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _copy_rows(conninfo: str, rows: Iterator[Row],
               columns: Optional[Dict[str, Tuple[str, ...]]] = None) -> None:
    """COPY every row, one connection per table, all open at once.

    ``columns`` (from ``copy_columns``) names, per table, the columns to
    COPY, a subset of ``COLUMNS``; None = all of them.
    """
    from psycopg import sql

    with ExitStack() as stack:
        connections = []
        copy_stacks = []
        writers = {}

        def writer_for(table: str) -> Callable[[tuple], None]:
            names = COLUMNS[table] if columns is None else columns[table]
            conn = stack.enter_context(_connect(conninfo))
            conn.execute("SET synchronous_commit = off")
            statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table),
                sql.SQL(", ").join(sql.Identifier(c) for c in names))
            copy_stack = stack.enter_context(ExitStack())
            connections.append(conn)
            copy_stacks.append(copy_stack)
            write = copy_stack.enter_context(conn.cursor().copy(statement)).write_row
            if tuple(names) == COLUMNS[table]:
                return write
            keep = [COLUMNS[table].index(name) for name in names]
            return lambda values: write([values[i] for i in keep])

        for row in rows:
            write = writers.get(row.table)
            if write is None:
                write = writers[row.table] = writer_for(row.table)
            write(row.values)
        # Finish every COPY (any error surfaces here) before committing any table.
        for copy_stack in copy_stacks:
            copy_stack.close()
        for conn in connections:
            conn.commit()


def _reset_sequences(conn) -> None:
    from psycopg import sql

    for table in CLUSTER_TABLES:
        conn.execute(sql.SQL(
            "SELECT setval(pg_get_serial_sequence({t}, 'id'), "
            "coalesce((SELECT max(id) FROM {i}), 0) + 1, false)"
        ).format(t=sql.Literal("public." + table), i=sql.Identifier(table)))
    conn.commit()


def _load_finished_blocks(conninfo: str, spec: ClusterSpec, blocks: Sequence[int],
                          columns: Optional[Dict[str, Tuple[str, ...]]] = None) -> dict:
    """Worker process: COPY some blocks of finished jobs, return their counts."""
    generator = ClusterGenerator(spec)
    _copy_rows(conninfo, generator.finished_rows(blocks), columns)
    summary = generator.summary
    return {"rows": summary.rows, "jobs_by_state": summary.jobs_by_state,
            "tokens_by_kind": summary.tokens_by_kind}


def _merge_counts(summary: Summary, counts: dict) -> None:
    summary.rows.update(counts["rows"])
    summary.jobs_by_state.update(counts["jobs_by_state"])
    summary.tokens_by_kind.update(counts["tokens_by_kind"])


def default_generation_workers() -> int:
    # Python makes the rows slower than PostgreSQL stores them: one generating
    # process per core, but PostgreSQL's COPY backends need some CPU as well.
    return max(1, min(4, os.cpu_count() or 1))


def load_cluster(conninfo: str, spec: ClusterSpec, defer_indexes: Optional[bool] = None,
                 replace: bool = False, index_workers: int = 2,
                 generation_workers: Optional[int] = None,
                 indexes_sql: Optional[Path] = None) -> Tuple[Summary, LoadTimings]:
    """Generate ``spec`` into the database at ``conninfo`` ('' = libpq's PG* env).

    Blocks of finished jobs are generated and copied by ``generation_workers``
    processes; each process commits its own COPYs, so a failed load can leave
    rows behind: load again with ``replace=True``.

    Only the columns the target tables have are copied (read once from
    the catalog), so the 2017 schema loads too. ``indexes_sql`` is
    the file whose indexes a deferred-index load drops and rebuilds:
    ``INDEXES_SQL`` (default) or, for the 2017 schema, ``INDEXES_2017_SQL``.
    """
    generator = ClusterGenerator(spec)
    timings = LoadTimings()
    if defer_indexes is None:
        defer_indexes = spec.jobs >= DEFER_INDEXES_FROM_JOBS
    timings.deferred_indexes = defer_indexes
    workers = generation_workers or default_generation_workers()
    workers = max(1, min(workers, generator.finished_blocks))
    definitions = index_definitions(indexes_sql or INDEXES_SQL)
    began = time.monotonic()
    with ExitStack() as stack:
        pool = None
        if workers > 1:
            # Fork before any connection exists, so children share no socket.
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(workers - 1))
        conn = stack.enter_context(_connect(conninfo))
        _prepare_tables(conn, replace)
        columns = copy_columns(conn)
        if all(columns[table] == COLUMNS[table] for table in COLUMNS):
            columns = None  # today's schema: every row as generated
        if defer_indexes:
            _check_index_definitions(conn, definitions)
            drop_indexes(conn, definitions)
            timings.drop_indexes = time.monotonic() - began
        try:
            copy_began = time.monotonic()
            blocks = range(generator.finished_blocks)
            pending = [pool.apply_async(_load_finished_blocks,
                                        (conninfo, spec, blocks[worker::workers], columns))
                       for worker in range(1, workers)] if pool else []
            _copy_rows(conninfo, itertools.chain(generator.user_rows(),
                                                 generator.finished_rows(blocks[0::workers]),
                                                 generator.active_rows()), columns)
            for result in pending:
                _merge_counts(generator.summary, result.get())
            timings.copy = time.monotonic() - copy_began
        finally:
            if defer_indexes:
                # Even after a failed load the schema keeps its indexes.
                index_began = time.monotonic()
                create_indexes(conninfo, definitions, workers=index_workers)
                timings.index = time.monotonic() - index_began
        _reset_sequences(conn)
        analyze_began = time.monotonic()
        conn.autocommit = True
        from psycopg import sql

        for table in CLUSTER_TABLES:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        timings.analyze = time.monotonic() - analyze_began
    timings.total = time.monotonic() - began
    return generator.summary, timings


# ---------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------

def lab_conninfo() -> str:
    """Where to load: libpq's PG* variables if they name a server, else the local lab.

    The lab (lab/labctl.py) is reached as Arvados reaches it: the ``arvados``
    role over TCP, database ``arvados_production``.
    """
    if os.environ.get("PGHOST") or os.environ.get("PGSERVICE"):
        return ""
    import psycopg
    from lab import labctl

    return psycopg.conninfo.make_conninfo(**labctl.lab_settings().connection())


def slurm_environment() -> Dict[str, str]:
    """The environment for Slurm's clients: ``LC_ALL=C``, the lab's slurm.conf by default."""
    env = dict(os.environ, LC_ALL="C")
    if "SLURM_CONF" not in env:
        from lab import labctl

        lab_conf = labctl.lab_settings().slurm_conf
        if lab_conf.exists():
            env["SLURM_CONF"] = str(lab_conf)
    return env


def sbatch_command(job_uuid: str, sleep_seconds: int, sbatch: str = "sbatch") -> List[str]:
    if not uuids.is_uuid_of("job", job_uuid):
        raise ValueError("not a job uuid: %r" % (job_uuid,))
    return [sbatch, "--parsable", "--job-name=%s" % job_uuid, "--output=/dev/null",
            "--chdir=/tmp", "--wrap", "exec sleep %d" % int(sleep_seconds)]


def submit_slurm_jobs(job_uuids: Sequence[str], limit: int, sleep_seconds: int = 3600,
                      sbatch: str = "sbatch",
                      run: Callable[..., subprocess.CompletedProcess] = subprocess.run
                      ) -> Dict[str, str]:
    """One ``sbatch`` per job, for at most ``limit`` jobs; returns uuid -> Slurm job id."""
    env = slurm_environment()
    submitted = {}
    for job_uuid in list(job_uuids)[:max(0, limit)]:
        result = run(sbatch_command(job_uuid, sleep_seconds, sbatch), env=env,
                     capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            raise RuntimeError("sbatch for %s failed (exit %d): %s"
                               % (job_uuid, result.returncode, result.stderr.strip()))
        submitted[job_uuid] = result.stdout.strip().split(";")[0]
    return submitted


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab.datagen",
        description="Fill an Arvados-shaped database with a generated cluster.")
    parser.add_argument("--dsn", default=None,
                        help="libpq connection string (default: the PG* environment if "
                             "PGHOST is set, else the local lab's database)")
    parser.add_argument("--prefix", default="zzzzz", help="cluster prefix (default zzzzz)")
    parser.add_argument("--jobs", type=int, default=200, help="all jobs (default 200)")
    parser.add_argument("--running", type=int, default=20, help="Running jobs (default 20)")
    parser.add_argument("--queued", type=int, default=10, help="Queued jobs (default 10)")
    parser.add_argument("--tasks-per-job", type=int, default=2,
                        help="tasks of each started job (default 2)")
    parser.add_argument("--users", type=int, default=10, help="ordinary users (default 10)")
    parser.add_argument("--idle-users", type=int, default=2,
                        help="of those, users who run no job (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--boot-time", default="btime",
                        help="'btime' (this host's boot, default), '@EPOCH' or ISO 8601 UTC")
    parser.add_argument("--running-after-boot", type=int, default=1,
                        help="Running jobs started after the boot time (default 1)")
    parser.add_argument("--running-unstarted", type=int, default=0,
                        help="Running jobs with no started_at (default 0)")
    parser.add_argument("--running-span-hours", type=float, default=24 * 7,
                        help="Running jobs started within this many hours before boot "
                             "(default 168)")
    parser.add_argument("--no-decoys", action="store_true",
                        help="no untouchable tokens around the running jobs")
    parser.add_argument("--no-finished-job-tokens", action="store_true",
                        help="no (expired) tokens for finished jobs")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--defer-indexes", dest="defer_indexes", action="store_true",
                       default=None, help="drop indexes.sql's indexes, rebuild after the load "
                                          "(default from %d jobs)" % DEFER_INDEXES_FROM_JOBS)
    group.add_argument("--keep-indexes", dest="defer_indexes", action="store_false")
    parser.add_argument("--schema", choices=sorted(SCHEMA_INDEXES), default="current",
                        help="the target's schema, whose indexes.sql a deferred-index load "
                             "drops and rebuilds: current (lab/schema, default) or 2017 "
                             "(lab/schema/2017)")
    parser.add_argument("--replace", action="store_true",
                        help="empty the cluster tables first (else they must be empty)")
    parser.add_argument("--slurm-jobs", type=int, default=0,
                        help="submit a Slurm job named after each of up to N running jobs "
                             "(default 0)")
    parser.add_argument("--slurm-sleep", type=int, default=3600,
                        help="how long those Slurm jobs sleep, seconds (default 3600)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--max-listed", type=int, default=20,
                        help="list at most this many running job uuids (default 20)")
    return parser


def spec_from_args(args: argparse.Namespace) -> ClusterSpec:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 31)
    return ClusterSpec(
        boot_time=parse_time(args.boot_time), now=utc_now(), prefix=args.prefix,
        jobs=args.jobs, running=args.running, queued=args.queued,
        running_after_boot=args.running_after_boot, running_unstarted=args.running_unstarted,
        tasks_per_job=args.tasks_per_job, users=args.users, idle_users=args.idle_users,
        seed=seed, running_span=timedelta(hours=args.running_span_hours),
        decoys=not args.no_decoys, finished_job_tokens=not args.no_finished_job_tokens,
    )


def format_report(summary: Summary, timings: LoadTimings, max_listed: int) -> str:
    lines = [
        "cluster %s, seed %d, boot time %sZ" % (summary.prefix, summary.seed,
                                               summary.boot_time.isoformat()),
        "rows: " + ", ".join("%s %d" % item for item in sorted(summary.rows.items())),
        "jobs by state: " + ", ".join("%s %d" % item
                                      for item in sorted(summary.jobs_by_state.items())),
        "tokens by kind: " + ", ".join("%s %d" % item
                                       for item in sorted(summary.tokens_by_kind.items())),
        "running before boot: %d, after boot: %d, without started_at: %d" % (
            len(summary.running_before_boot), len(summary.running_after_boot),
            len(summary.running_unstarted)),
    ]
    for label, items in (("before boot", summary.running_before_boot),
                         ("after boot", summary.running_after_boot),
                         ("without started_at", summary.running_unstarted)):
        shown = items[:max_listed]
        if shown:
            more = " (+%d more)" % (len(items) - len(shown)) if len(items) > len(shown) else ""
            lines.append("  %s: %s%s" % (label, " ".join(shown), more))
    if summary.slurm_jobs:
        lines.append("slurm jobs submitted: %d" % len(summary.slurm_jobs))
    lines.append("time: total %.1f s, copy %.1f s, indexes %.1f s (%s), analyze %.1f s, "
                 "peak RSS %.0f MiB" % (timings.total, timings.copy, timings.index,
                                        "deferred" if timings.deferred_indexes else "kept",
                                        timings.analyze, peak_rss_mib()))
    return "\n".join(lines)


def _psycopg_error() -> type:
    try:
        import psycopg
    except ImportError:
        return RuntimeError
    return psycopg.Error


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = spec_from_args(args)
        conninfo = lab_conninfo() if args.dsn is None else args.dsn
        summary, timings = load_cluster(conninfo, spec, defer_indexes=args.defer_indexes,
                                        replace=args.replace,
                                        indexes_sql=SCHEMA_INDEXES[args.schema])
        if args.slurm_jobs:
            summary.slurm_jobs = submit_slurm_jobs(summary.running_uuids, args.slurm_jobs,
                                                   args.slurm_sleep)
    except (ValueError, RuntimeError, OSError, _psycopg_error()) as error:
        print("datagen: %s" % error, file=sys.stderr)
        return 1
    if args.json:
        report = summary.to_dict()
        report["timings"] = vars(timings)
        report["peak_rss_mib"] = round(peak_rss_mib(), 1)
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_report(summary, timings, args.max_listed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
