"""Which tokens another's work could own (SQL_TOKEN_OTHER_OWNERS, issue 21), on the lab's
PostgreSQL: the boundaries of the windows the per-batch statement works with, and the
statement against the rule written token by token, on generated clusters of few and of
many users.

The statement is called as a batch calls it (`other_owners`); the tokens are only its
parameters (the statement reads no token row), so each test says exactly when each was made.
"""

from __future__ import annotations

import random
from datetime import UTC, timedelta

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.before import Before
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import SQL_BATCH_JOBS, BatchJob
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.tokens import (
    TokenCandidate,
    TokenOwners,
    other_owners,
    start_window,
    token_candidates,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import new_uuid
from tests.integration import test_fail_jobs_arvados_rules as rules

arvados_db = rules.arvados_db
cluster = rules.cluster

MICROSECOND = timedelta(microseconds=1)
LOG_INFIX = "57u5n"

# The rule one token at a time (every holder of each token, jobs and pipeline instances
# apart): the per-batch statement must name one of these for exactly the tokens that have
# one. A job holds a token of its user made at or after its creation while it is Queued or
# Running, or if it ended at or after the token (finished_at, or cancelled_at), or if it
# ended at no known time; unless a cleanup's `dispatch` row of the job (owner the job's
# owner, not an attempt's "dispatching to ...") was written at or after the token.
OWNERS_TOKEN_BY_TOKEN = """
    SELECT t.id, o.uuid, 'job'
    FROM unnest(%(ids)s::bigint[], %(users)s::text[], %(made)s::timestamp[]) AS t(id, user_uuid, made)
    JOIN jobs o ON (o.is_locked_by_uuid = t.user_uuid OR o.modified_by_user_uuid = t.user_uuid)
    WHERE o.created_at <= t.made
      AND (o.state IN ('Queued', 'Running')
           OR (o.finished_at IS NULL AND o.cancelled_at IS NULL)
           OR o.finished_at >= t.made OR o.cancelled_at >= t.made)
      AND o.uuid <> ALL(%(batch)s::text[])
      AND NOT (o.state = 'Running'
               AND (%(run_uuids)s::text[] IS NULL OR o.uuid = ANY(%(run_uuids)s::text[]))
               AND (%(every_row)s OR o.finished_at IS NULL)
               AND (%(before)s::timestamp IS NULL OR o.started_at < %(before)s::timestamp))
      AND NOT EXISTS (SELECT 1 FROM logs l WHERE l.object_uuid = o.uuid AND l.event_type = 'dispatch'
                      AND l.owner_uuid = o.owner_uuid AND l.summary NOT LIKE 'dispatching to %%'
                      AND l.created_at >= t.made)
    UNION ALL
    SELECT t.id, p.uuid, 'pipeline'
    FROM unnest(%(ids)s::bigint[], %(users)s::text[], %(made)s::timestamp[]) AS t(id, user_uuid, made)
    JOIN pipeline_instances p ON p.modified_by_user_uuid = t.user_uuid
    WHERE p.state = 'RunningOnServer' AND p.created_at <= t.made
"""


def candidates(tokens):
    """TokenCandidates of (user uuid, made) pairs, numbered from 1 in the order given."""
    return [
        TokenCandidate(number, "zzzzz-gj3su-%015d" % number, user, made)
        for number, (user, made) in enumerate(tokens, start=1)
    ]


def owners_of(cluster, tokens, batch=(), **options):
    """{token number: the owner the statement names} for (user, made) pairs."""
    found = other_owners(cluster.conn, CleanupOptions(**options), candidates(tokens), list(batch))
    cluster.conn.commit()
    return found


SYSTEM_USER = rules.SYSTEM_USER


def dispatch_log(cluster, job_uuid, created, event_type="dispatch", kind="cleanup"):
    """A log row of the job: a `dispatch` row of a cleanup (fail_job's kind, 1.4.3
    crunch_dispatch.rb:222-232: owner the job's owner, summary the reason), which ends its
    holding of the tokens made up to it; a `dispatch` row of an attempt
    (nodes_available_for_job_now, :184-191: owner the system user, "dispatching to ..."),
    which ends nothing; or another row (`stderr`, `update`), which ends nothing either."""
    if kind == "cleanup":
        owner = cluster.conn.execute("SELECT owner_uuid FROM jobs WHERE uuid = %s", (job_uuid,)).fetchone()[0]
        summary = "cleaned up stale job: started before now"
    else:
        owner, summary = SYSTEM_USER, "dispatching to compute0"
    cluster.conn.execute(
        "INSERT INTO logs (uuid, owner_uuid, object_uuid, event_type, summary, created_at, updated_at, event_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (new_uuid(rules.PREFIX, LOG_INFIX), owner, job_uuid, event_type, summary, created, created, created),
    )
    cluster.conn.commit()


def stale_job(cluster, user):
    """The job a run ends: only here so that `uuids` names a job, leaving the others alone."""
    return cluster.job(user, cluster.ago(hours=9), started=cluster.ago(hours=8))


# -- the boundaries of a window ----------------------------------------------------------


def test_a_running_sibling_holds_every_token_since_its_creation_whatever_its_start(cluster):
    """After exit 93 the job stays Running and is dispatched again (1.4.3 crunch_dispatch.rb
    reap_children): a new token after its start is possible. An inconsistent Running row
    that never started but has a finished_at is Running all the same."""
    user, other = cluster.user(), cluster.user()
    stale = stale_job(cluster, user)
    created, started = cluster.ago(hours=3), cluster.ago(hours=1)
    sibling = cluster.job(user, created, started=started)
    odd = cluster.job(other, cluster.ago(hours=5), finished=cluster.ago(hours=4))
    made = [created - MICROSECOND, created, started + MICROSECOND]
    odd_made = [cluster.ago(hours=5) - MICROSECOND, cluster.ago(hours=5), cluster.ago(seconds=1)]

    found = owners_of(cluster, [(user, m) for m in made] + [(other, m) for m in odd_made], uuids=[stale])

    assert found == {2: sibling, 3: sibling, 5: odd, 6: odd}


def test_a_queued_job_holds_every_token_since_its_creation(cluster):
    """After exit 75 (tempfail) the job stays Queued and its token is neither expired nor
    forgotten: the next attempt reuses it (get_authorization)."""
    user = cluster.user()
    created = cluster.ago(hours=3)
    queued = cluster.job(user, created, state="Queued")

    found = owners_of(cluster, [(user, created - MICROSECOND), (user, created), (user, cluster.ago(seconds=1))])

    assert found == {2: queued, 3: queued}


@pytest.mark.parametrize("state", ["Complete", "Failed"])
def test_a_finished_sibling_holds_the_tokens_made_up_to_its_finish(cluster, state):
    user = cluster.user()
    created, finished = cluster.ago(hours=3), cluster.ago(hours=1)
    done = cluster.job(user, created, state=state, started=cluster.ago(hours=2), finished=finished)
    made = [created - MICROSECOND, created, finished, finished + MICROSECOND]

    found = owners_of(cluster, [(user, m) for m in made])

    assert found == {2: done, 3: done}


def test_a_cancelled_sibling_holds_the_tokens_made_up_to_its_cancel(cluster):
    """1.4.3 app/models/job.rb update_timestamps_when_state_changes sets cancelled_at, not
    finished_at, when a job becomes Cancelled; an ended job with neither ended at an unknown
    time and holds every token since its creation."""
    user = cluster.user()
    created, cancelled = cluster.ago(hours=3), cluster.ago(hours=1)
    done = cluster.job(user, created, state="Cancelled", started=cluster.ago(hours=2))
    cluster.conn.execute("UPDATE jobs SET cancelled_at = %s WHERE uuid = %s", (cancelled, done))
    cluster.conn.commit()
    other = cluster.user()
    unknown = cluster.job(other, created, state="Failed", started=cluster.ago(hours=2))

    found = owners_of(
        cluster, [(user, cancelled), (user, cancelled + MICROSECOND), (other, created), (other, cluster.ago(seconds=1))]
    )

    assert found == {1: done, 3: unknown, 4: unknown}


def test_a_sibling_in_the_same_batch_owns_nothing(cluster):
    user = cluster.user()
    stale = stale_job(cluster, user)
    sibling = cluster.job(user, cluster.ago(hours=3), started=cluster.ago(hours=1))
    token = [(user, cluster.ago(hours=2))]

    assert owners_of(cluster, token, batch=[stale], uuids=[stale, sibling]) == {}
    assert owners_of(cluster, token, batch=[stale, sibling], uuids=[stale]) == {}
    assert owners_of(cluster, token, batch=[stale], uuids=[stale]) == {1: sibling}


def test_a_running_job_the_run_ends_owns_nothing_and_one_it_does_not_end_does(cluster):
    user = cluster.user()
    threshold = cluster.ago(hours=2)
    before = cluster.job(user, cluster.ago(hours=4), started=threshold - MICROSECOND)
    after = cluster.job(user, cluster.ago(hours=4), started=threshold)
    token = [(user, cluster.ago(hours=3))]
    moment = Before(threshold.replace(tzinfo=UTC), "test")

    assert owners_of(cluster, token, before=moment) == {1: after}
    # `uuids` ends only the jobs it names
    assert owners_of(cluster, token, uuids=[after]) == {1: before}
    assert owners_of(cluster, token, uuids=[before, after]) == {}


def test_a_running_row_with_finished_at_owns_tokens_unless_the_run_reads_every_row(cluster):
    """The listing by the index on finished_at (`full_scan: false`) does not see a Running
    job with finished_at set (SQL_RUNNING); the default, `full_scan`, does and ends it."""
    user = cluster.user()
    odd = cluster.job(user, cluster.ago(hours=4), started=cluster.ago(hours=1), finished=cluster.ago(hours=5))
    token = [(user, cluster.ago(hours=3))]

    assert owners_of(cluster, token, full_scan=False) == {1: odd}
    assert owners_of(cluster, token) == {}


@pytest.mark.parametrize(
    "event_type, kind", [("dispatch", "attempt"), ("stderr", "cleanup")], ids=["attempt", "stderr"]
)
def test_a_row_after_the_token_that_is_no_cleanup_does_not_make_a_sibling_let_go_of_it(cluster, event_type, kind):
    """crunch-dispatch.rb writes a `dispatch` row on every attempt (1.4.3 crunch_dispatch.rb
    nodes_available_for_job_now) and keeps the token across attempts: such a row after the
    token proves nothing, even for a job the system user owns. The one that ended reaches
    less far than the one still running."""
    user = cluster.user()
    stale = stale_job(cluster, user)
    made = cluster.ago(hours=2)
    ended = cluster.job(
        user, cluster.ago(hours=3), state="Failed", started=cluster.ago(hours=1), finished=cluster.ago(minutes=30)
    )
    dispatch_log(cluster, ended, made + MICROSECOND, event_type, kind)
    alone = cluster.user()
    root_owned = cluster.job(
        alone, cluster.ago(hours=3), state="Failed", started=cluster.ago(hours=1), finished=cluster.ago(minutes=30)
    )
    cluster.conn.execute("UPDATE jobs SET owner_uuid = %s WHERE uuid = %s", (SYSTEM_USER, root_owned))
    cluster.conn.commit()
    dispatch_log(cluster, root_owned, made, event_type, kind)

    assert owners_of(cluster, [(user, made), (alone, made)], uuids=[stale]) == {1: ended, 2: root_owned}

    running = cluster.job(user, cluster.ago(hours=2, minutes=30), started=cluster.ago(hours=1, minutes=50))
    dispatch_log(cluster, running, made, event_type, kind)

    assert owners_of(cluster, [(user, made)], uuids=[stale]) == {1: running}


@pytest.mark.parametrize("at_token", [True, False], ids=["at-token", "before-token"])
def test_a_cleanup_row_at_or_after_the_token_ends_a_siblings_holding_of_it(cluster, at_token):
    """A job a cleanup ended (its fail_job row) dealt with its tokens then; requeued by a
    cleanup, it holds only the tokens made after that row."""
    user = cluster.user()
    stale = stale_job(cluster, user)
    made = cluster.ago(hours=2)
    ended = cluster.job(
        user, cluster.ago(hours=3), state="Failed", started=cluster.ago(hours=1), finished=cluster.ago(minutes=30)
    )
    dispatch_log(cluster, ended, made if at_token else made - MICROSECOND)
    requeued = cluster.job(cluster.user(), cluster.ago(hours=3), state="Queued")
    requeued_user = cluster.job_row(requeued)["modified_by_user_uuid"]
    dispatch_log(cluster, requeued, made)

    found = owners_of(
        cluster, [(user, made), (requeued_user, made), (requeued_user, made + MICROSECOND)], uuids=[stale]
    )

    assert found == ({3: requeued} if at_token else {1: ended, 3: requeued})


def test_a_pipeline_owns_the_tokens_since_its_creation_when_no_job_does(cluster):
    user, other = cluster.user(), cluster.user()
    made = cluster.ago(hours=2)
    later = cluster.pipeline(user, made + MICROSECOND)
    first = cluster.pipeline(user, made)
    second = cluster.pipeline(user, cluster.ago(hours=3))
    cluster.pipeline(user, cluster.ago(hours=4), state="Complete")
    job = cluster.job(other, cluster.ago(hours=3), state="Complete", started=made, finished=cluster.ago(hours=1))
    cluster.pipeline(other, cluster.ago(hours=4))

    found = owners_of(cluster, [(user, made), (user, made - timedelta(hours=2)), (other, made)])

    assert found[1] == min(first, second) and later not in found.values()
    assert 2 not in found
    # a job is named before a pipeline instance
    assert found[3] == job


def test_a_job_is_a_sibling_for_the_user_of_either_of_its_user_columns(cluster):
    runner, modifier = cluster.user(), cluster.user()
    job = cluster.job(
        runner, cluster.ago(hours=3), state="Complete", started=cluster.ago(hours=1), finished=cluster.ago(hours=0.5)
    )
    cluster.conn.execute("UPDATE jobs SET modified_by_user_uuid = %s WHERE uuid = %s", (modifier, job))
    cluster.conn.commit()
    made = cluster.ago(hours=2)

    assert owners_of(cluster, [(runner, made), (modifier, made), (cluster.user(), made)]) == {1: job, 2: job}


# -- the statement against the rule token by token ----------------------------------------

STATES = ["Running", "Running", "Complete", "Failed", "Cancelled", "Queued"]


def generated_cluster(cluster, rng, users, jobs, tokens_per_user):
    """Jobs, their log rows, pipeline instances and tokens at instants on a 10-minute grid (so
    that windows open and close where tokens are made), some a microsecond off it."""
    people = [cluster.user() for _user in range(users)]
    grid = [cluster.ago(hours=12) + timedelta(minutes=10 * step) for step in range(72)]

    def instant():
        return rng.choice(grid) + rng.choice([timedelta(0)] * 4 + [MICROSECOND, -MICROSECOND])

    def maybe(value, probability):
        return value if rng.random() < probability else None

    made = []
    for _job in range(jobs):
        created = instant()
        started = maybe(created + timedelta(minutes=10 * rng.randrange(0, 8)), 0.9)
        finished = maybe((started or created) + timedelta(minutes=10 * rng.randrange(0, 12)), 0.6)
        user = rng.choice(people)
        job = cluster.job(
            user,
            created,
            state=rng.choice(STATES),
            started=started,
            finished=finished,
            locked_by=rng.choice([None, None, "", rng.choice(people)]),
            modified_by=rng.choice([None, None, "", rng.choice(people)]),
        )
        if rng.random() < 0.5:
            cancelled = maybe(instant(), 0.8)
            cluster.conn.execute("UPDATE jobs SET cancelled_at = %s WHERE uuid = %s", (cancelled, job))
            cluster.conn.commit()
        for event_type, kind in (("dispatch", "cleanup"), ("dispatch", "attempt"), ("stderr", "cleanup")):
            if rng.random() < 0.3:
                dispatch_log(cluster, job, instant(), event_type, kind)
        made.append(job)
    for _pipeline in range(max(1, users // 3)):
        cluster.pipeline(rng.choice(people), instant(), state=rng.choice(["RunningOnServer", "Complete"]))
    tokens = [(user, instant()) for user in people for _token in range(tokens_per_user)]
    return made, tokens


def rule_owners(cluster, cleanup, tokens, batch=()):
    """{token id: {kind: the owners of that kind the rule gives it}} for `tokens`, as a batch
    of `batch` asks (a run before its first batch asks with none)."""
    rule = cluster.conn.execute(
        OWNERS_TOKEN_BY_TOKEN,
        {
            "ids": [t.id for t in tokens],
            "users": [t.user_uuid for t in tokens],
            "made": [t.created_at for t in tokens],
            "batch": list(batch),
            "run_uuids": cleanup.uuids,
            "every_row": cleanup.uuids is not None or cleanup.full_scan,
            "before": cleanup.db_before,
        },
    ).fetchall()
    cluster.conn.commit()
    owners = {}
    for token_id, owner, kind in rule:
        owners.setdefault(token_id, {}).setdefault(kind, set()).add(owner)
    return owners


def assert_the_rules_owners(found, rule):
    """`found` names an owner for exactly the tokens the rule gives one: one of its jobs,
    else the first of its pipeline instances."""
    assert set(found) == set(rule)
    for token_id, owner in found.items():
        if "job" in rule[token_id]:
            assert owner in rule[token_id]["job"]
        else:
            assert owner == min(rule[token_id]["pipeline"])


# Clusters of few users with many tokens each, and of many users with few.
CLUSTER_SHAPES = pytest.mark.parametrize(
    "users, jobs, tokens_per_user",
    [(2, 30, 30), (40, 160, 3)],
    ids=["few-users", "many-users"],
)


def run_options(rng, jobs, threshold_instant):
    choice = rng.choice(["uuids", "before", "full_scan", "none"])
    if choice == "uuids":
        return {"uuids": rng.sample(jobs, len(jobs) // 4)}
    if choice == "before":
        return {"before": Before(threshold_instant.replace(tzinfo=UTC), "test")}
    return {"full_scan": choice == "full_scan"}


@CLUSTER_SHAPES
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_batch_statement_names_an_owner_for_exactly_the_tokens_the_rule_gives_one(
    cluster, seed, users, jobs, tokens_per_user
):
    rng = random.Random(seed)
    made, tokens = generated_cluster(cluster, rng, users, jobs, tokens_per_user)
    batch = rng.sample(made, len(made) // 10)
    options = run_options(rng, made, cluster.ago(hours=rng.randrange(1, 12)))
    tokens_given = candidates(tokens)
    cleanup = CleanupOptions(**options)

    found = other_owners(cluster.conn, cleanup, tokens_given, batch)

    rule = rule_owners(cluster, cleanup, tokens_given, batch)
    assert_the_rules_owners(found, rule)
    # the generated clusters do reach the cases compared
    assert any("job" in kinds for kinds in rule.values()) and len(found) < len(tokens_given)


# -- the run's one judgement (TokenOwners) against the rule token by token ----------------


def run_jobs(cluster, cleanup):
    """The BatchJobs the run of `cleanup` ends, as its batches read them."""
    uuids = cleanup.uuids
    if uuids is None:
        where = "state = 'Running'" + ("" if cleanup.full_scan else " AND finished_at IS NULL")
        uuids = [row[0] for row in cluster.conn.execute("SELECT uuid FROM jobs WHERE " + where).fetchall()]
    rows = cluster.conn.execute(SQL_BATCH_JOBS, {"uuids": uuids, "before": cleanup.db_before}).fetchall()
    cluster.conn.commit()
    return [BatchJob(*row) for row in rows]


@CLUSTER_SHAPES
@pytest.mark.parametrize("seed", [4, 6, 7])
def test_the_runs_judgement_names_the_owner_the_rule_gives_every_token_its_jobs_hold(
    cluster, seed, users, jobs, tokens_per_user
):
    """Judged once before the first batch, from the tokens in the table: each judged token
    gets an owner exactly when the rule gives it one, and every token in a window of a job
    the run ends is judged, so no batch asks the statement again."""
    rng = random.Random(seed)
    made, tokens = generated_cluster(cluster, rng, users, jobs, tokens_per_user)
    ids = dict(
        (
            cluster.conn.execute(
                "SELECT id FROM api_client_authorizations WHERE uuid = %s", (cluster.token(user, instant),)
            ).fetchone()[0],
            (user, instant),
        )
        for user, instant in tokens
    )
    cluster.conn.commit()
    cleanup = CleanupOptions(**run_options(rng, made, cluster.ago(hours=rng.randrange(1, 12))))

    owners = TokenOwners.read(cluster.conn, cleanup)
    cluster.conn.commit()

    judged = [TokenCandidate(i, "", user, instant) for i, (user, instant) in ids.items() if owners.judged(i)]
    assert_the_rules_owners(owners.owners, rule_owners(cluster, cleanup, judged))
    in_windows = token_candidates(cluster.conn, [w for w in map(start_window, run_jobs(cluster, cleanup)) if w])
    cluster.conn.commit()
    assert in_windows and all(owners.judged(token.id) for token in in_windows)
    # the generated clusters do reach the cases compared
    assert owners.owners and len(owners.owners) < len(judged)
