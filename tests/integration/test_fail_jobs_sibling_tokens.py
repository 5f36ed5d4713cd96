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

from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_threshold import Threshold
from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_tokens import (
    TokenCandidate,
    other_owners,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils.uuids import new_uuid
from tests.integration import test_fail_jobs_arvados_rules as rules

arvados_db = rules.arvados_db
cluster = rules.cluster

MICROSECOND = timedelta(microseconds=1)
LOG_INFIX = "57u5n"

# The rule as it was written first, one token at a time (every owner of each token, jobs
# and pipeline instances apart): the per-batch statement must name one of these for
# exactly the tokens that have one.
OWNERS_TOKEN_BY_TOKEN = """
    SELECT t.id, o.uuid, 'job'
    FROM unnest(%(ids)s::bigint[], %(users)s::text[], %(made)s::timestamp[]) AS t(id, user_uuid, made)
    JOIN jobs o ON (o.is_locked_by_uuid = t.user_uuid OR o.modified_by_user_uuid = t.user_uuid)
    WHERE (o.started_at >= t.made OR (o.started_at IS NULL AND o.finished_at IS NULL))
      AND o.created_at <= t.made
      AND (o.state = 'Running' OR o.finished_at > t.made)
      AND o.uuid <> ALL(%(batch)s::text[])
      AND NOT (o.state = 'Running'
               AND (%(run_uuids)s::text[] IS NULL OR o.uuid = ANY(%(run_uuids)s::text[]))
               AND (%(every_row)s OR o.finished_at IS NULL)
               AND (%(threshold)s::timestamp IS NULL OR o.started_at < %(threshold)s::timestamp))
      AND NOT EXISTS (SELECT 1 FROM logs l WHERE l.object_uuid = o.uuid
                      AND l.event_type = 'dispatch' AND l.created_at >= t.made)
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


def dispatch_log(cluster, job_uuid, created, event_type="dispatch"):
    """A `dispatch` log row of the job, as a cleanup (or Arvados' fail_job) writes one; or
    another row of the job (`stderr`, `update`), which ends nothing."""
    cluster.conn.execute(
        "INSERT INTO logs (uuid, object_uuid, event_type, created_at, updated_at, event_at)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (new_uuid(rules.PREFIX, LOG_INFIX), job_uuid, event_type, created, created, created),
    )
    cluster.conn.commit()


def stale_job(cluster, user):
    """The job a run ends: only here so that `uuids` names a job, leaving the others alone."""
    return cluster.job(user, cluster.ago(hours=9), started=cluster.ago(hours=8))


# -- the boundaries of a window ----------------------------------------------------------


def test_a_window_holds_the_instants_of_its_creation_and_of_its_start(cluster):
    user = cluster.user()
    stale = stale_job(cluster, user)
    created, started = cluster.ago(hours=3), cluster.ago(hours=1)
    sibling = cluster.job(user, created, started=started)
    made = [created - MICROSECOND, created, started, started + MICROSECOND]

    found = owners_of(cluster, [(user, m) for m in made], uuids=[stale])

    assert found == {2: sibling, 3: sibling}


@pytest.mark.parametrize("after_start", [timedelta(0), MICROSECOND], ids=["at-start", "after-start"])
def test_a_finished_sibling_owns_a_token_made_at_its_start_only_if_it_finished_after_it(cluster, after_start):
    user = cluster.user()
    created, started = cluster.ago(hours=3), cluster.ago(hours=1)
    done = cluster.job(user, created, state="Complete", started=started, finished=started + after_start)

    found = owners_of(cluster, [(user, started), (user, created)])

    # at its creation it had not finished: always its
    assert found == ({1: done, 2: done} if after_start else {2: done})


def test_an_unstarted_running_sibling_holds_every_token_since_its_creation(cluster):
    user = cluster.user()
    stale = stale_job(cluster, user)
    created = cluster.ago(hours=3)
    waiting = cluster.job(user, created)
    # Running, never started but finished: an inconsistent row whose window never opened
    cluster.job(user, created - timedelta(hours=1), finished=cluster.ago(hours=2))
    made = [created - MICROSECOND, created, cluster.ago(minutes=1)]

    found = owners_of(cluster, [(user, m) for m in made], uuids=[stale])

    assert found == {2: waiting, 3: waiting}


def test_a_queued_job_owns_no_token(cluster):
    user = cluster.user()
    cluster.job(user, cluster.ago(hours=3), state="Queued")

    assert owners_of(cluster, [(user, cluster.ago(hours=2))]) == {}


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
    moment = Threshold(threshold.replace(tzinfo=UTC), "test")

    assert owners_of(cluster, token, threshold=moment) == {1: after}
    # `uuids` ends only the jobs it names
    assert owners_of(cluster, token, uuids=[after]) == {1: before}
    assert owners_of(cluster, token, uuids=[before, after]) == {}


def test_a_running_row_with_finished_at_owns_tokens_unless_the_run_reads_every_row(cluster):
    """The default listing does not see a Running job with finished_at set (SQL_RUNNING),
    `full_scan` does and ends it."""
    user = cluster.user()
    odd = cluster.job(user, cluster.ago(hours=4), started=cluster.ago(hours=1), finished=cluster.ago(hours=5))
    token = [(user, cluster.ago(hours=3))]

    assert owners_of(cluster, token) == {1: odd}
    assert owners_of(cluster, token, full_scan=True) == {}


@pytest.mark.parametrize("log_before_token", [True, False], ids=["log-before", "log-at-token"])
def test_a_sibling_ended_by_a_cleanup_yields_to_another_that_could_own_the_token(cluster, log_before_token):
    """The cleaned sibling reaches furthest, so it is the one the statement would name:
    its `dispatch` row at or after the token must not hide the other sibling."""
    user = cluster.user()
    stale = stale_job(cluster, user)
    made = cluster.ago(hours=2)
    ended = cluster.job(
        user, cluster.ago(hours=3), state="Failed", started=cluster.ago(hours=1), finished=cluster.ago(minutes=30)
    )
    dispatch_log(cluster, ended, made - MICROSECOND if log_before_token else made)
    running = cluster.job(user, cluster.ago(hours=2, minutes=30), started=cluster.ago(hours=1, minutes=50))
    dispatch_log(cluster, running, made, event_type="stderr")
    alone = cluster.user()
    ended_alone = cluster.job(
        alone, cluster.ago(hours=3), state="Failed", started=cluster.ago(hours=1), finished=cluster.ago(minutes=30)
    )
    dispatch_log(cluster, ended_alone, made)
    dispatch_log(cluster, ended_alone, made - timedelta(hours=1))

    found = owners_of(cluster, [(user, made), (alone, made)], uuids=[stale])

    assert found == {1: ended if log_before_token else running}


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
        for event_type in ("dispatch", "stderr"):
            if rng.random() < 0.3:
                dispatch_log(cluster, job, instant(), event_type)
        made.append(job)
    for _pipeline in range(max(1, users // 3)):
        cluster.pipeline(rng.choice(people), instant(), state=rng.choice(["RunningOnServer", "Complete"]))
    tokens = [(user, instant()) for user in people for _token in range(tokens_per_user)]
    return made, tokens


def run_options(rng, jobs, threshold_instant):
    choice = rng.choice(["uuids", "threshold", "full_scan", "none"])
    if choice == "uuids":
        return {"uuids": rng.sample(jobs, len(jobs) // 4)}
    if choice == "threshold":
        return {"threshold": Threshold(threshold_instant.replace(tzinfo=UTC), "test")}
    return {"full_scan": choice == "full_scan"}


@pytest.mark.parametrize(
    "users, jobs, tokens_per_user",
    [(2, 30, 30), (40, 160, 3)],
    ids=["few-users", "many-users"],
)
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
    rule = cluster.conn.execute(
        OWNERS_TOKEN_BY_TOKEN,
        {
            "ids": [t.id for t in tokens_given],
            "users": [t.user_uuid for t in tokens_given],
            "made": [t.created_at for t in tokens_given],
            "batch": batch,
            "run_uuids": cleanup.uuids,
            "every_row": cleanup.uuids is not None or cleanup.full_scan,
            "threshold": cleanup.db_threshold,
        },
    ).fetchall()
    cluster.conn.commit()

    jobs_of, pipelines_of = {}, {}
    for token_id, owner, kind in rule:
        (jobs_of if kind == "job" else pipelines_of).setdefault(token_id, set()).add(owner)
    assert set(found) == set(jobs_of) | set(pipelines_of)
    for token_id, owner in found.items():
        if token_id in jobs_of:
            assert owner in jobs_of[token_id]
        else:
            assert owner == min(pipelines_of[token_id])
    # the generated clusters do reach the cases compared
    assert jobs_of and len(found) < len(tokens_given)
