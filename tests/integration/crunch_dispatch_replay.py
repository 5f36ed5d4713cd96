"""crunch-dispatch.rb's writes, replayed path by path, as Arvados 1.4.3 leaves the rows.

The tests' picture of crunch v1 once had every job dispatched once, so a rule that read a
`dispatch` row as "ended by a cleanup" passed them and revoked the tokens of running work.
Here each function is one code path of 1.4.3's `services/api/lib/crunch_dispatch.rb` (and of
the model code and crunch-job calls it makes), writing exactly the rows and the columns that
path writes, at the replay's clock, with the tag:path:line it follows in its docstring.
`Dispatcher` also keeps what crunch-dispatch.rb keeps only in memory (`@authorizations`,
`@running`, `@todo_job_retries`, `@job_retry_counts`, `@pipe_auth_tokens`): the truth the
tests hold the cleanup to, which the database alone cannot tell.

Paths (`Dispatcher.<name>`):
- `submit` (the API's job create), `admin_touches` (another user's update of a job's
  priority), `user_cancels` (the API's cancel);
- `dispatch` (start_jobs: the attempt's `dispatch` row, get_authorization, crunch-job started);
- `crunch_job_locks` (crunch-job's `jobs/lock`), `crunch_job_succeeds`, `crunch_job_fails`
  (crunch-job writes the final state and exits), `crunch_job_dies` (exits leaving Running);
- `exit_tempfail` (exit 75 before the lock), `exit_node_failure` (exit 93 after it);
- `fail_job` (start_jobs' fail_job: commit missing), `pipeline_starts`, `pipeline_ends`;
- `restart` (crunch-dispatch.rb killed and started again: its memory is gone),
  `stop` (TERM: the run loop's end fails the jobs awaiting a retry).

Audit rows (`update`/`create` log rows of ArvadosModel's after_save callbacks) are written
for each save of a job, token or pipeline instance, as the model does with audit logging on,
with their owner, object and summary; their `properties` (old and new attributes) are left
`{}`, as nothing the cleanup reads looks at them.
"""

from __future__ import annotations

import json
import random
import secrets
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import (
    JOB_INFIX,
    TOKEN_INFIX,
    USER_INFIX,
    new_uuid,
)

PREFIX = "zzzzz"
SYSTEM_USER = PREFIX + "-tpzed-000000000000000"
LOG_INFIX = "57u5n"
PIPELINE_INFIX = "d1hrv"
# 1.4.3 crunch_dispatch.rb:13-15
EXIT_TEMPFAIL = 75
EXIT_RETRY_UNLOCKED = 93
RETRY_UNLOCKED_LIMIT = 3


@dataclass
class Token:
    uuid: str
    user: str
    made: datetime
    expired: bool = False


@dataclass
class Job:
    uuid: str
    owner: str
    modified_by: str
    created: datetime
    state: str = "Queued"
    locked_by: str | None = None
    started: datetime | None = None
    finished: datetime | None = None
    cancelled: datetime | None = None


@dataclass
class Dispatcher:
    """One database written as crunch-dispatch.rb 1.4.3 and its crunch-jobs write it."""

    conn: psycopg.Connection
    clock: datetime
    rng: random.Random
    users: list[str] = field(default_factory=list)
    admin: str | None = None
    jobs: dict[str, Job] = field(default_factory=dict)
    tokens: dict[str, Token] = field(default_factory=dict)
    pipelines: dict[str, str] = field(default_factory=dict)  # uuid -> state
    # crunch-dispatch.rb's memory (1.4.3 crunch_dispatch.rb:42-52)
    authorizations: dict[str, Token] = field(default_factory=dict)
    running: dict[str, Token] = field(default_factory=dict)  # job -> @running[job][:job_auth]
    todo_job_retries: set[str] = field(default_factory=set)
    job_retry_counts: Counter = field(default_factory=Counter)
    pipe_auth_tokens: dict[str, Token] = field(default_factory=dict)
    # crunch-jobs started and not yet reaped that have not locked their job yet
    unlocked_children: set[str] = field(default_factory=set)
    trace: list[str] = field(default_factory=list)
    _next_user_id: int = 1000

    # -- the clock and the rows ------------------------------------------------------

    def tick(self, most_seconds: float = 600) -> datetime:
        """Time passes (whole microseconds, as timestamp stores them)."""
        self.clock += timedelta(microseconds=self.rng.randrange(1, int(most_seconds * 1e6)))
        return self.clock

    def _log(self, object_uuid, event_type, owner, summary=None, properties=None, object_owner=None):
        """A row of `logs` as Log.new(...).save! writes it (1.4.3 app/models/log.rb)."""
        self.conn.execute(
            "INSERT INTO logs (uuid, owner_uuid, modified_by_user_uuid, object_uuid, object_owner_uuid,"
            " event_at, event_type, summary, properties, created_at, updated_at, modified_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                new_uuid(PREFIX, LOG_INFIX),
                owner,
                SYSTEM_USER,
                object_uuid,
                object_owner,
                self.clock,
                event_type,
                summary,
                json.dumps(properties or {}),
                self.clock,
                self.clock,
                self.clock,
            ),
        )

    def _audit(self, event_type, object_uuid, object_owner, by):
        """ArvadosModel#log_create / log_update (1.4.3 app/models/arvados_model.rb): owner the
        acting user, summary "<event> of <uuid>"."""
        self._log(object_uuid, event_type, by, "%s of %s" % (event_type, object_uuid), {}, object_owner)

    def _save_job(self, job: Job, by: str, **columns) -> None:
        """job.save as `by` (current_user): modified_by_user_uuid and modified_at follow."""
        job.modified_by = by
        columns = dict(columns, modified_by_user_uuid=by, modified_at=self.clock, updated_at=self.clock)
        assignments = ", ".join("%s = %%(%s)s" % (name, name) for name in columns)
        self.conn.execute("UPDATE jobs SET %s WHERE uuid = %%(uuid)s" % assignments, dict(columns, uuid=job.uuid))
        self._audit("update", job.uuid, job.owner, by)

    # -- the world around the dispatcher ---------------------------------------------

    def user(self, is_admin: bool = False) -> str:
        uuid = new_uuid(PREFIX, USER_INFIX)
        self._next_user_id += 1
        self.conn.execute(
            "INSERT INTO users (id, uuid, owner_uuid, created_at, updated_at, modified_at, is_admin, is_active)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, true)",
            (self._next_user_id, uuid, SYSTEM_USER, self.clock, self.clock, self.clock, is_admin),
        )
        self.users.append(uuid)
        if is_admin:
            self.admin = uuid
        return uuid

    def submit(self, user: str) -> str:
        """The API's jobs#create by `user` (1.4.3 app/models/job.rb): Queued, owned and last
        modified by the user, priority 0 and no lock."""
        uuid = new_uuid(PREFIX, JOB_INFIX)
        self.conn.execute(
            "INSERT INTO jobs (uuid, owner_uuid, modified_by_user_uuid, modified_at, created_at, updated_at,"
            " script, script_version, script_parameters, repository, state, running, priority,"
            " runtime_constraints, tasks_summary, components)"
            " VALUES (%s, %s, %s, %s, %s, %s, 'hash', 'abc123', '{\"input\":\"x\"}', 'arvados', 'Queued',"
            " false, 1, '{}', '{}', '{}')",
            (uuid, user, user, self.clock, self.clock, self.clock),
        )
        self._audit("create", uuid, user, user)
        self.jobs[uuid] = Job(uuid, user, user, self.clock)
        self.trace.append("submit %s" % uuid[-4:])
        return uuid

    def admin_touches(self, job_uuid: str) -> None:
        """An admin changes the priority of a queued or running job: permitted even while it
        is locked (1.4.3 app/models/job.rb permission_to_update, :510-531, protects other
        attributes); modified_by_user_uuid becomes the admin, which get_authorization reads."""
        job = self.jobs[job_uuid]
        self._save_job(job, self.admin, priority=self.rng.randrange(1, 1000))
        self.trace.append("admin_touches %s" % job_uuid[-4:])

    def user_cancels(self, job_uuid: str) -> None:
        """jobs#cancel by its owner (1.4.3 app/models/job.rb:579-588: Cancelled sets
        cancelled_at, not finished_at). A running crunch-job sees it and exits, and
        reap_children expires the token (crunch_dispatch.rb:727-731)."""
        job = self.jobs[job_uuid]
        job.state, job.cancelled = "Cancelled", self.clock
        self._save_job(
            job,
            job.owner,
            state="Cancelled",
            cancelled_at=self.clock,
            cancelled_by_user_uuid=job.owner,
            running=False,
        )
        self.trace.append("user_cancels %s" % job_uuid[-4:])
        if job_uuid in self.running:
            self.tick(60)
            self._reap(job_uuid, exit_status=1)

    # -- crunch-dispatch.rb ------------------------------------------------------------

    def dispatch(self, job_uuid: str) -> None:
        """start_jobs for one job under slurm_immediate (1.4.3 crunch_dispatch.rb:335-474):
        nodes_available_for_job_now writes the attempt's `dispatch` row (:184-191, owner
        the system user), get_authorization makes or reuses the job's token (:259-279), and
        crunch-job starts; the job leaves @todo_job_retries (:471)."""
        job = self.jobs[job_uuid]
        self._log(
            job_uuid,
            "dispatch",
            SYSTEM_USER,
            "dispatching to compute0",
            {"text": "dispatching job %s {} to compute0 zzzzz-7ekkf-000000000000000 {}" % job_uuid},
        )
        self._get_authorization(job)
        self.running[job_uuid] = self.authorizations[job_uuid]
        self.todo_job_retries.discard(job_uuid)
        if job.state == "Queued":
            self.unlocked_children.add(job_uuid)
        self.trace.append("dispatch %s" % job_uuid[-4:])

    def _get_authorization(self, job: Job) -> None:
        """1.4.3 crunch_dispatch.rb:259-279: a token per job, kept in memory and reused
        unless modified_by_user_uuid changed, when the old one is expired first."""
        held = self.authorizations.get(job.uuid)
        if held is not None and held.user != job.modified_by:
            self._expire(held)
            held = None
        if held is None:
            held = self._new_token(job.modified_by)
            self.authorizations[job.uuid] = held

    def _new_token(self, user: str) -> Token:
        """ApiClientAuthorization.new(user:, api_client_id: 0).save (crunch_dispatch.rb:269-272):
        no expiry, a random secret, as the system user."""
        uuid = new_uuid(PREFIX, TOKEN_INFIX)
        self.conn.execute(
            "INSERT INTO api_client_authorizations (uuid, api_token, api_client_id, user_id, created_at,"
            " updated_at) VALUES (%s, %s, 0, (SELECT id FROM users WHERE uuid = %s), %s, %s)",
            (uuid, secrets.token_hex(25), user, self.clock, self.clock),
        )
        self._audit("create", uuid, user, SYSTEM_USER)
        token = Token(uuid, user, self.clock)
        self.tokens[uuid] = token
        return token

    def _expire(self, token: Token) -> None:
        """update_attributes expires_at: Time.now (crunch_dispatch.rb:265, :730, :747)."""
        self.conn.execute(
            "UPDATE api_client_authorizations SET expires_at = %s, updated_at = %s WHERE uuid = %s",
            (self.clock, self.clock, token.uuid),
        )
        self._audit("update", token.uuid, token.user, SYSTEM_USER)
        token.expired = True

    def crunch_job_locks(self, job_uuid: str) -> None:
        """crunch-job's `jobs/lock` with the job's token (1.4.3 sdk/cli/bin/crunch-job:205-214;
        app/models/job.rb:118-127 lock: Running and locked by the token's user; :583
        started_at)."""
        job = self.jobs[job_uuid]
        token = self.running[job_uuid]
        job.state, job.locked_by, job.started = "Running", token.user, self.clock
        self._save_job(
            job, token.user, state="Running", running=True, is_locked_by_uuid=token.user, started_at=self.clock
        )
        self.unlocked_children.discard(job_uuid)
        self.trace.append("lock %s" % job_uuid[-4:])

    def crunch_job_succeeds(self, job_uuid: str) -> None:
        """crunch-job writes Complete with the job's token and exits 0; reap_children expires
        the token (crunch_dispatch.rb:727-731); job.rb:585 sets finished_at."""
        self._crunch_job_ends(job_uuid, "Complete", True, exit_status=0)

    def crunch_job_fails(self, job_uuid: str) -> None:
        """crunch-job writes Failed and exits 1; the token is expired at the reap."""
        self._crunch_job_ends(job_uuid, "Failed", False, exit_status=1)

    def _crunch_job_ends(self, job_uuid: str, state: str, success: bool, exit_status: int) -> None:
        job = self.jobs[job_uuid]
        token = self.running[job_uuid]
        job.state, job.finished = state, self.clock
        self._save_job(job, token.user, state=state, running=False, success=success, finished_at=self.clock)
        self.trace.append("%s %s" % (state.lower(), job_uuid[-4:]))
        self.tick(5)
        self._reap(job_uuid, exit_status)

    def crunch_job_dies(self, job_uuid: str) -> None:
        """crunch-job exits 1 with the job still Running: reap_children fails it as the
        system user (crunch_dispatch.rb:695-706) and expires the token."""
        self.trace.append("dies %s" % job_uuid[-4:])
        self._reap(job_uuid, exit_status=1)

    def exit_tempfail(self, job_uuid: str) -> None:
        """crunch-job exits 75 before its lock (a lost race, a failed sanity check): the job
        stays Queued and keeps its token for the next attempt (crunch_dispatch.rb:707-731)."""
        self.trace.append("tempfail %s" % job_uuid[-4:])
        self._reap(job_uuid, exit_status=EXIT_TEMPFAIL)

    def exit_node_failure(self, job_uuid: str) -> None:
        """crunch-job exits 93 after every node failed: the job stays Running in
        @todo_job_retries and keeps its token, up to RETRY_UNLOCKED_LIMIT times
        (crunch_dispatch.rb:678-693); then it is failed and its token expired."""
        self.trace.append("node_failure %s" % job_uuid[-4:])
        self._reap(job_uuid, exit_status=EXIT_RETRY_UNLOCKED)

    def _reap(self, job_uuid: str, exit_status: int) -> None:
        """reap_children for one child (1.4.3 crunch_dispatch.rb:639-734)."""
        job = self.jobs[job_uuid]
        exit_tempfail = exit_status == EXIT_TEMPFAIL
        if exit_status == EXIT_RETRY_UNLOCKED or (exit_tempfail and job_uuid in self.job_retry_counts):
            self.job_retry_counts[job_uuid] += 1
            exit_tempfail = self.job_retry_counts[job_uuid] <= RETRY_UNLOCKED_LIMIT
            if exit_tempfail:
                self.todo_job_retries.add(job_uuid)
        if not exit_tempfail:
            self.job_retry_counts.pop(job_uuid, None)
            if job.state == "Running":
                job.state, job.finished = "Failed", self.clock
                self._save_job(job, SYSTEM_USER, state="Failed", running=False, success=False, finished_at=self.clock)
        if job.state != "Queued" and job_uuid not in self.todo_job_retries:
            self._expire(self.running[job_uuid])
        del self.running[job_uuid]
        self.unlocked_children.discard(job_uuid)

    def fail_job(self, job_uuid: str, message: str = "commit not present in internal repository") -> None:
        """start_jobs after get_authorization, the commit missing (crunch_dispatch.rb:401-403):
        fail_job (:222-247) writes its `dispatch` row (owner the job's owner), locks the job
        for the token's user unless this process holds it, and saves it Failed, as the
        system user. The token stays in @authorizations, never expired."""
        job = self.jobs[job_uuid]
        self._log(job_uuid, "dispatch", job.owner, message, {"text": message})
        if job_uuid not in self.todo_job_retries:
            token = self.authorizations[job_uuid]
            job.state, job.locked_by, job.started = "Running", token.user, self.clock
            self._save_job(
                job, SYSTEM_USER, state="Running", running=True, is_locked_by_uuid=token.user, started_at=self.clock
            )
        job.state, job.finished = "Failed", self.clock
        self._save_job(job, SYSTEM_USER, state="Failed", running=False, success=False, finished_at=self.clock)
        self.trace.append("fail_job %s" % job_uuid[-4:])

    def get_authorization_then_fail(self, job_uuid: str) -> None:
        """start_jobs: get_authorization (:369), then the commit is missing (:401-403)."""
        self._log(
            job_uuid, "dispatch", SYSTEM_USER, "dispatching to compute0", {"text": "dispatching job %s" % job_uuid}
        )
        self._get_authorization(self.jobs[job_uuid])
        self.fail_job(job_uuid)

    def pipeline_starts(self, user: str) -> str:
        """A RunningOnServer pipeline instance: update_pipelines makes its token for its
        modified_by_user_uuid (1.4.3 crunch_dispatch.rb:736-750)."""
        uuid = new_uuid(PREFIX, PIPELINE_INFIX)
        self.conn.execute(
            "INSERT INTO pipeline_instances (uuid, owner_uuid, created_at, updated_at, modified_at,"
            " modified_by_user_uuid, state) VALUES (%s, %s, %s, %s, %s, %s, 'RunningOnServer')",
            (uuid, user, self.clock, self.clock, self.clock, user),
        )
        self._audit("create", uuid, user, user)
        self.tick(2)
        self.pipe_auth_tokens[uuid] = self._new_token(user)
        self.pipelines[uuid] = "RunningOnServer"
        self.trace.append("pipeline_starts %s" % uuid[-4:])
        return uuid

    def pipeline_ends(self, uuid: str) -> None:
        """The instance leaves the queue; the next update_pipelines expires its token."""
        self.conn.execute(
            "UPDATE pipeline_instances SET state = 'Complete', modified_at = %s, updated_at = %s WHERE uuid = %s",
            (self.clock, self.clock, uuid),
        )
        self.pipelines[uuid] = "Complete"
        self.tick(5)
        self._expire(self.pipe_auth_tokens.pop(uuid))
        self.trace.append("pipeline_ends %s" % uuid[-4:])

    def restart(self) -> None:
        """crunch-dispatch.rb killed (runit restarts it): its memory is gone, its crunch-jobs
        with it (they were its children); nothing is written."""
        self.authorizations.clear()
        self.running.clear()
        self.todo_job_retries.clear()
        self.job_retry_counts.clear()
        self.pipe_auth_tokens.clear()
        self.unlocked_children.clear()
        self.trace.append("restart")

    def stop(self) -> None:
        """TERM with no child left: the run loop's end fails the jobs awaiting a retry
        (1.4.3 crunch_dispatch.rb:838-845), then the process is gone."""
        for job_uuid in sorted(self.todo_job_retries):
            if self.jobs[job_uuid].state == "Running":
                self.fail_job(job_uuid, "crunch-dispatch was stopped during job's tempfail retry loop")
        self.restart()
        self.trace[-1] = "stop"

    # -- what the database cannot tell --------------------------------------------------

    def tokens_in_use(self, ended: set[str]) -> dict[str, str]:
        """{token uuid: the job or pipeline instance whose live work uses it}, for the jobs not
        in `ended`: the token a running crunch-job was started with; the token
        crunch-dispatch.rb keeps for a Queued job or one awaiting a retry, which its next
        attempt reuses while modified_by_user_uuid still names the token's user (else
        get_authorization expires it then, 1.4.3 crunch_dispatch.rb:260-267); and a running
        pipeline instance's token."""
        used = {}
        for job_uuid, token in self.running.items():
            if job_uuid not in ended and not token.expired:
                used[token.uuid] = job_uuid
        for job_uuid, token in self.authorizations.items():
            job = self.jobs[job_uuid]
            reused = job.state in ("Queued", "Running") and token.user == job.modified_by
            if job_uuid not in ended and reused and not token.expired:
                used[token.uuid] = job_uuid
        for pipeline, token in self.pipe_auth_tokens.items():
            if self.pipelines[pipeline] == "RunningOnServer":
                used[token.uuid] = pipeline
        return used

    def own_token(self, job_uuid: str) -> Token | None:
        """The token crunch-dispatch.rb holds for the job, if it is still valid."""
        token = self.authorizations.get(job_uuid)
        return token if token is not None and not token.expired else None


def actions(world: Dispatcher) -> list[tuple[str, tuple]]:
    """Every path crunch-dispatch.rb or its world could take next, as (name, arguments)."""
    found: list[tuple[str, tuple]] = [("submit", (world.rng.choice(world.users),))]
    for job in world.jobs.values():
        uuid = job.uuid
        in_flight = uuid in world.running
        if job.state == "Queued" and not in_flight:
            found += [("dispatch", (uuid,)), ("user_cancels", (uuid,)), ("admin_touches", (uuid,))]
            if uuid in world.authorizations or world.rng.random() < 0.2:
                found.append(("get_authorization_then_fail", (uuid,)))
        if uuid in world.unlocked_children:
            found += [("crunch_job_locks", (uuid,)), ("exit_tempfail", (uuid,))]
        elif in_flight and job.state == "Running":
            found += [
                ("crunch_job_succeeds", (uuid,)),
                ("crunch_job_fails", (uuid,)),
                ("crunch_job_dies", (uuid,)),
                ("exit_node_failure", (uuid,)),
                ("user_cancels", (uuid,)),
                ("admin_touches", (uuid,)),
            ]
            if uuid in world.job_retry_counts:
                found.append(("exit_tempfail", (uuid,)))
        if uuid in world.todo_job_retries and not in_flight and job.state == "Running":
            found += [("dispatch", (uuid,)), ("admin_touches", (uuid,))]
    for pipeline, state in world.pipelines.items():
        if state == "RunningOnServer" and pipeline in world.pipe_auth_tokens:
            found.append(("pipeline_ends", (pipeline,)))
    found += [("pipeline_starts", (world.rng.choice(world.users),)), ("restart", ())]
    if not world.running:
        found.append(("stop", ()))
    return found


# How often each path is taken, against the others: crunch-job's own paths are the common
# ones; a restart is rare, or sequences would rarely get far.
WEIGHTS = {
    "submit": 6,
    "dispatch": 8,
    "crunch_job_locks": 8,
    "exit_tempfail": 4,
    "exit_node_failure": 4,
    "crunch_job_succeeds": 3,
    "crunch_job_fails": 2,
    "crunch_job_dies": 1,
    "user_cancels": 1,
    "admin_touches": 1,
    "get_authorization_then_fail": 1,
    "pipeline_starts": 1,
    "pipeline_ends": 1,
    "restart": 0.3,
    "stop": 0.3,
}


def random_sequence(world: Dispatcher, steps: int) -> None:
    """`steps` paths chosen at random among those possible, with time passing between."""
    for _step in range(steps):
        choices = actions(world)
        name, arguments = world.rng.choices(choices, weights=[WEIGHTS[n] for n, _a in choices])[0]
        world.tick()
        getattr(world, name)(*arguments)
