"""The generated cluster: ClusterSpec in, Row after Row out (users, jobs, tasks, tokens, containers), streaming."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import uuids

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


class UserRow(NamedTuple):
    """A row of ``users``, its fields in the table's column order."""

    id: object
    uuid: object
    owner_uuid: object
    created_at: object
    modified_by_client_uuid: object
    modified_by_user_uuid: object
    modified_at: object
    email: object
    first_name: object
    last_name: object
    identity_url: object
    is_admin: object
    prefs: object
    updated_at: object
    default_owner_uuid: object
    is_active: object
    username: object


USERS_COLUMNS = UserRow._fields


class JobRow(NamedTuple):
    """A row of ``jobs``, its fields in the table's column order (COPY writes it as is)."""

    id: object
    uuid: object
    owner_uuid: object
    modified_by_client_uuid: object
    modified_by_user_uuid: object
    modified_at: object
    submit_id: object
    script: object
    script_version: object
    script_parameters: object
    cancelled_by_client_uuid: object
    cancelled_by_user_uuid: object
    cancelled_at: object
    started_at: object
    finished_at: object
    running: object
    success: object
    output: object
    created_at: object
    updated_at: object
    is_locked_by_uuid: object
    log: object
    tasks_summary: object
    runtime_constraints: object
    nondeterministic: object
    repository: object
    supplied_script_version: object
    docker_image_locator: object
    priority: object
    description: object
    state: object
    arvados_sdk_version: object
    components: object
    script_parameters_digest: object


JOBS_COLUMNS = JobRow._fields


class TaskRow(NamedTuple):
    """A row of ``job_tasks``, its fields in the table's column order."""

    id: object
    uuid: object
    owner_uuid: object
    modified_by_client_uuid: object
    modified_by_user_uuid: object
    modified_at: object
    job_uuid: object
    sequence: object
    parameters: object
    output: object
    progress: object
    success: object
    created_at: object
    updated_at: object
    created_by_job_task_uuid: object
    qsequence: object
    started_at: object
    finished_at: object


JOB_TASKS_COLUMNS = TaskRow._fields


class TokenRow(NamedTuple):
    """A row of ``api_client_authorizations``, its fields in the table's column order."""

    id: object
    api_token: object
    api_client_id: object
    user_id: object
    created_by_ip_address: object
    last_used_by_ip_address: object
    last_used_at: object
    expires_at: object
    created_at: object
    updated_at: object
    default_owner_uuid: object
    scopes: object
    uuid: object


TOKENS_COLUMNS = TokenRow._fields


class ContainerRow(NamedTuple):
    """A row of ``containers``, its fields in the table's column order."""

    id: object
    uuid: object
    owner_uuid: object
    created_at: object
    modified_at: object
    modified_by_client_uuid: object
    modified_by_user_uuid: object
    state: object
    started_at: object
    finished_at: object
    environment: object
    cwd: object
    command: object
    output_path: object
    mounts: object
    runtime_constraints: object
    container_image: object
    priority: object
    updated_at: object
    auth_uuid: object
    locked_by_uuid: object
    runtime_user_uuid: object


CONTAINERS_COLUMNS = ContainerRow._fields
COLUMNS = {
    "users": USERS_COLUMNS,
    "jobs": JOBS_COLUMNS,
    "job_tasks": JOB_TASKS_COLUMNS,
    "api_client_authorizations": TOKENS_COLUMNS,
    "containers": CONTAINERS_COLUMNS,
}
# Tables the generator fills plus logs, which a cleanup writes to.
CLUSTER_TABLES = ("users", "jobs", "job_tasks", "api_client_authorizations", "containers", "logs")


# What every generated container runs with: one small image's working directory.
CONTAINER_RUN_SETTINGS = {
    "environment": "{}",
    "cwd": "/var/spool/cwl",
    "output_path": "/var/spool/cwl",
    "mounts": "{}",
    "runtime_constraints": '{"ram":1073741824,"vcpus":1}',
}


class Row(NamedTuple):
    table: str
    values: tuple
    kind: str | None  # job state, or token kind; None for other tables

    def as_dict(self) -> dict:
        return dict(zip(COLUMNS[self.table], self.values, strict=True))


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
            "jobs": self.jobs,
            "running": self.running,
            "queued": self.queued,
            "running_after_boot": self.running_after_boot,
            "running_unstarted": self.running_unstarted,
            "tasks_per_job": self.tasks_per_job,
            "users": self.users,
            "idle_users": self.idle_users,
        }
        negative = [name for name, value in counts.items() if value < 0]
        if negative:
            raise ValueError("counts must not be negative: %s" % ", ".join(negative))
        if self.running + self.queued > self.jobs:
            raise ValueError("running + queued (%d) exceeds jobs (%d)" % (self.running + self.queued, self.jobs))
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
    running_before_boot: list[str] = field(default_factory=list)
    running_after_boot: list[str] = field(default_factory=list)
    running_unstarted: list[str] = field(default_factory=list)
    # running job uuid -> uuid of the token the dispatcher made for it
    job_token_uuids: dict[str, str] = field(default_factory=dict)
    decoy_token_uuids: dict[str, list[str]] = field(default_factory=dict)
    slurm_jobs: dict[str, str] = field(default_factory=dict)  # job uuid -> Slurm job id

    @property
    def running_uuids(self) -> list[str]:
        return self.running_before_boot + self.running_unstarted + self.running_after_boot

    def to_dict(self, max_uuids: int | None = None) -> dict:
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
    return json.dumps({"failed": failed, "todo": todo, "running": running, "done": done}, separators=(",", ":"))


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
    started: float | None
    finished: float | None
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
        self._runners: list[_User] = []
        self._idle: list[_User] = []
        self._user_rows = list(self._make_users())
        self._projects = [self._uuid(self.rng, uuids.GROUP_INFIX) for _ in range(3)]
        self._docker_images = [
            portable_data_hash(manifest_for("docker", "image%d.tar" % i, 10**9 + i)) for i in range(3)
        ]
        self.finished_jobs = spec.jobs - spec.running - spec.queued
        boot = _seconds(spec.boot_time)
        self._running_region = (boot - 1.0 - spec.running_span.total_seconds(), boot - 1.0)
        self._finished_region = (self._running_region[0] - spec.history.total_seconds(), self._running_region[0])
        # The active jobs' ids follow the finished jobs' fixed ranges.
        tasks = spec.tasks_per_job
        self._next_id = Counter(
            users=len(self._user_rows),
            jobs=self.finished_jobs,
            job_tasks=self.finished_jobs * tasks,
            api_client_authorizations=self.finished_jobs if spec.finished_job_tokens else 0,
        )
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

    def _row(self, table: str, values: tuple, kind: str | None = None) -> Row:
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

    def finished_rows(self, blocks: Sequence[int] | None = None) -> Iterator[Row]:
        for block in range(self.finished_blocks) if blocks is None else blocks:
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
    def _slots(count: int, start: float, end: float) -> Iterator[tuple[float, float]]:
        """``count`` disjoint, consecutive time slots covering [start, end)."""
        if count <= 0:
            return
        width = (end - start) / count
        for index in range(count):
            yield start + index * width, width

    def _make_users(self) -> Iterator[UserRow]:
        spec = self.spec
        start = _seconds(spec.boot_time) - spec.running_span.total_seconds() - spec.history.total_seconds() - 86400.0
        yield self._user_values(self._system_user, start, "root", is_admin=True)
        for number in range(1, spec.users + 1):
            user = _User(1 + number, self._uuid(self.rng, uuids.USER_INFIX))
            (self._idle if number > spec.users - spec.idle_users else self._runners).append(user)
            yield self._user_values(user, start + number, "user%d" % number, is_admin=False)

    def _user_values(self, user: _User, created: float, username: str, is_admin: bool) -> UserRow:
        at = _at(created)
        system_uuid = self._system_user.uuid
        return UserRow(
            id=user.id,
            uuid=user.uuid,
            owner_uuid=system_uuid,
            created_at=at,
            modified_by_client_uuid=self._client_uuid,
            modified_by_user_uuid=system_uuid,
            modified_at=at,
            email="%s@example.com" % username,
            first_name=username.capitalize(),
            last_name="Lab",
            identity_url="https://login.example.com/%s" % username,
            is_admin=is_admin,
            prefs="{}",
            updated_at=at,
            default_owner_uuid=None,
            is_active=True,
            username=username,
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
            plan = _JobPlan(
                self._uuid(rng, uuids.JOB_INFIX),
                state,
                self._pick_owner(rng, user),
                user,
                created,
                started,
                finished,
                finished,
            )
            done = tasks if state == "Complete" else rng.randint(0, tasks)
            yield self._job_row(rng, index + 1, plan, done=done, running=0)
            yield from self._task_rows(rng, index * tasks, index * tasks, plan, done, 0)
            if spec.finished_job_tokens:
                yield self._token_row(
                    rng,
                    index + 1,
                    FINISHED_JOB_TOKEN,
                    user,
                    rng.uniform(created, started),
                    expires=finished,
                    last_used=finished,
                )

    # -- running and queued jobs ----------------------------------------
    def _running_job(
        self, slot_start: float, width: float, started: bool, horizon: float | None = None
    ) -> Iterator[Row]:
        rng = self.rng
        user = rng.choice(self._runners)
        start_time = slot_start + 0.7 * width if started else None
        plan = _JobPlan(
            self._uuid(rng, uuids.JOB_INFIX),
            "Running",
            self._pick_owner(rng, user),
            user,
            slot_start + 0.3 * width,
            start_time,
            None,
            horizon if horizon is not None else _seconds(self.spec.boot_time),
        )
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
            yield from self._task_rows(rng, first_id, self._qsequence - tasks, plan, done, running)
        window_end = start_time if started else slot_start + 0.7 * width
        kind = JOB_TOKEN if started else UNSTARTED_JOB_TOKEN
        token = self._token_row(
            rng,
            self._id("api_client_authorizations"),
            kind,
            plan.user,
            rng.uniform(plan.created, window_end),
            last_used=window_end,
        )
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
            row = self._token_row(rng, self._id("api_client_authorizations"), kind, user, created, **extra)
            recorded = self.summary.decoy_token_uuids.setdefault(kind, [])
            if len(recorded) < MAX_RECORDED_DECOYS_PER_KIND:
                recorded.append(row.values[-1])
            return row

        yield token(OTHER_USER_TOKEN, rng.choice(self._idle), inside())
        yield token(API_CLIENT_TOKEN, plan.user, inside(), api_client_id=1)
        yield token(EXPIRED_TOKEN, plan.user, inside(), expires=_seconds(self.spec.now) - rng.uniform(60.0, 3600.0))
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
            plan = _JobPlan(
                self._uuid(rng, uuids.JOB_INFIX),
                "Queued",
                self._pick_owner(rng, user),
                user,
                slot_start + rng.random() * width,
                None,
                None,
                end,
            )
            yield self._job_row(rng, self._id("jobs"), plan, done=0, running=0)

    # -- rows ------------------------------------------------------------
    def _job_row(self, rng: random.Random, job_id: int, plan: _JobPlan, done: int, running: int) -> Row:
        state = plan.state
        input_pdh = portable_data_hash(manifest_for(plan.uuid, "input.fastq", rng.randint(1, 10**9)))
        parameters = '{"input":"%s","threads":%d}' % (input_pdh, rng.choice((1, 4, 8, 16)))
        finished = state in FINISHED_STATES
        log = output = None
        if finished:
            log = portable_data_hash(manifest_for(plan.uuid, "%s.log.txt" % plan.uuid, rng.randint(100, 10**7)))
            if state == "Complete":
                output = portable_data_hash(manifest_for(plan.uuid, "output.bam", rng.randint(1, 10**10)))
        tasks = self.spec.tasks_per_job
        failed_tasks = 1 if state == "Failed" and done < tasks else 0
        summary_text = (
            None
            if state == "Queued"
            else tasks_summary(done, running, tasks - done - running - failed_tasks, failed_tasks)
        )
        modified = _at(plan.finished or plan.started or plan.created)
        cancelled = state == "Cancelled"
        user_uuid = plan.user.uuid
        return self._row(
            "jobs",
            JobRow(
                id=job_id,
                uuid=plan.uuid,
                owner_uuid=plan.owner_uuid,
                modified_by_client_uuid=self._client_uuid,
                modified_by_user_uuid=user_uuid,
                modified_at=modified,
                submit_id=None,
                script=rng.choice(SCRIPTS),
                script_version="%040x" % rng.getrandbits(160),
                script_parameters=parameters,
                cancelled_by_client_uuid=self._client_uuid if cancelled else None,
                cancelled_by_user_uuid=user_uuid if cancelled else None,
                cancelled_at=modified if cancelled else None,
                started_at=_at(plan.started) if plan.started is not None else None,
                finished_at=modified if finished else None,
                running=state == "Running",
                success=True if state == "Complete" else (False if finished else None),
                output=output,
                created_at=_at(plan.created),
                updated_at=modified,
                is_locked_by_uuid=user_uuid if state != "Queued" else None,
                log=log,
                tasks_summary=summary_text,
                runtime_constraints='{"min_nodes":1,"max_tasks_per_node":%d}' % rng.choice((1, 2, 4)),
                nondeterministic=False,
                repository="arvados",
                supplied_script_version="master",
                docker_image_locator=rng.choice(self._docker_images),
                priority=rng.choice((0, 1, 100)),
                description=None,
                state=state,
                arvados_sdk_version="%040x" % rng.getrandbits(160),
                components=None,
                script_parameters_digest=hashlib.md5(parameters.encode()).hexdigest(),
            ),
            kind=state,
        )

    def _task_rows(
        self, rng: random.Random, first_id: int, first_qsequence: int, plan: _JobPlan, done: int, running: int
    ) -> Iterator[Row]:
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
            yield self._row(
                "job_tasks",
                TaskRow(
                    id=first_id + number + 1,
                    uuid=uuid,
                    owner_uuid=plan.owner_uuid,
                    modified_by_client_uuid=self._client_uuid,
                    modified_by_user_uuid=plan.user.uuid,
                    modified_at=modified,
                    job_uuid=plan.uuid,
                    sequence=0 if number == 0 else 1,
                    parameters='{"input":"%s/part%d"}' % (plan.uuid, number),
                    output=output,
                    progress=progress,
                    success=success,
                    created_at=job_started,
                    updated_at=modified,
                    created_by_job_task_uuid=first_uuid,
                    qsequence=first_qsequence + number + 1,
                    started_at=started_at,
                    finished_at=finished_at,
                ),
            )
            if first_uuid is None:
                first_uuid = uuid

    def _token_row(
        self,
        rng: random.Random,
        token_id: int,
        kind: str,
        user: _User,
        created: float,
        expires: float | None = None,
        last_used: float | None = None,
        api_client_id: int = 0,
    ) -> Row:
        created_at = _at(created)
        expires_at = _at(expires) if expires is not None else None
        return self._row(
            "api_client_authorizations",
            TokenRow(
                id=token_id,
                api_token="".join(rng.choices(uuids.ALPHABET, k=50)),
                api_client_id=api_client_id,
                user_id=user.id,
                created_by_ip_address="10.0.0.1",
                last_used_by_ip_address="10.0.0.1" if last_used is not None else None,
                last_used_at=_at(last_used) if last_used is not None else None,
                expires_at=expires_at,
                created_at=created_at,
                updated_at=expires_at if expires is not None and expires > created else created_at,
                default_owner_uuid=None,
                scopes='["all"]',
                uuid=self._uuid(rng, uuids.TOKEN_INFIX),
            ),
            kind=kind,
        )

    def _container_row(self, plan: _JobPlan, auth_uuid: str) -> Row:
        assert plan.started is not None
        created = _at(plan.created)
        started = _at(plan.started)
        return self._row(
            "containers",
            ContainerRow(
                id=self._id("containers"),
                uuid=self._uuid(self.rng, uuids.CONTAINER_INFIX),
                owner_uuid=self._system_user.uuid,
                created_at=created,
                modified_at=started,
                modified_by_client_uuid=self._client_uuid,
                modified_by_user_uuid=self._system_user.uuid,
                state="Running",
                started_at=started,
                finished_at=None,
                command='["sleep","3600"]',
                **CONTAINER_RUN_SETTINGS,
                container_image=self._docker_images[0],
                priority=1,
                updated_at=started,
                auth_uuid=auth_uuid,
                locked_by_uuid=self._dispatcher_token_uuid,
                runtime_user_uuid=plan.user.uuid,
            ),
        )


class ContainerSet(NamedTuple):
    """UUIDs of generated containers, by state."""

    live: list[str]  # Locked or Running, with the dispatcher's lock
    finished: list[str]  # Complete or Cancelled


def container_rows(
    prefix: str, count: int, live: int, now: datetime, first_id: int, seed: int = 0, finished_keep: int = 0
) -> tuple[Iterator[Row], ContainerSet]:
    """`count` containers: the first `live` alternately Running and Locked (locked by the
    cluster's dispatcher token, ``<prefix>-gj3su-000000000000000`` since Arvados 2.0),
    the rest Complete (nine in ten) or Cancelled, as a cluster that has run containers for
    a while. Rows come lazily; the UUIDs of the live ones and of the first
    `finished_keep` finished ones are returned for naming Slurm jobs after them."""
    if not 0 <= live <= count:
        raise ValueError("live (%d) must be between 0 and count (%d)" % (live, count))
    rng = random.Random(seed)
    system_user = uuids.system_user_uuid(prefix)
    dispatcher = "%s-%s-%s" % (prefix, uuids.TOKEN_INFIX, "0" * uuids.RANDOM_PART_LENGTH)
    names = [uuids.new_uuid(prefix, uuids.CONTAINER_INFIX, rng) for _ in range(count)]
    kept = ContainerSet(names[:live], names[live : live + finished_keep])

    def rows() -> Iterator[Row]:
        for number, uuid in enumerate(names):
            created = now - timedelta(seconds=rng.randrange(1, 86400 * 30))
            if number < live:
                state = "Running" if number % 2 == 0 else "Locked"
                started = created + timedelta(seconds=5) if state == "Running" else None
                finished, locked, priority = None, dispatcher, 1 + number % 1000
            else:
                state = "Complete" if number % 10 else "Cancelled"
                started = created + timedelta(seconds=5)
                finished, locked, priority = started + timedelta(seconds=60), None, 0
            yield Row(
                "containers",
                ContainerRow(
                    id=first_id + number,
                    uuid=uuid,
                    owner_uuid=system_user,
                    created_at=created,
                    modified_at=finished or created,
                    modified_by_client_uuid=None,
                    modified_by_user_uuid=system_user,
                    state=state,
                    started_at=started,
                    finished_at=finished,
                    command='["sleep","60"]',
                    **CONTAINER_RUN_SETTINGS,
                    container_image="arvados/jobs",
                    priority=priority,
                    updated_at=finished or created,
                    auth_uuid=None,
                    locked_by_uuid=locked,
                    runtime_user_uuid=None,
                ),
                None,
            )

    return rows(), kept


def host_boot_time(proc_stat: str = "/proc/stat") -> datetime:
    """This host's boot time (``btime``), naive UTC."""
    with open(proc_stat, encoding="ascii") as handle:
        for line in handle:
            if line.startswith("btime "):
                booted = datetime.fromtimestamp(int(line.split()[1]), UTC)
                return booted.replace(tzinfo=None)
    raise ValueError("no btime line in %s" % proc_stat)


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def parse_time(text: str) -> datetime:
    """``btime`` (this host's boot), ``@<epoch>``, or ISO 8601 (no zone = UTC)."""
    if text == "btime":
        return host_boot_time()
    if text.startswith("@"):
        return datetime.fromtimestamp(float(text[1:]), UTC).replace(tzinfo=None)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment
