# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which tokens a cleanup revokes: those made for a job in its window, not another's."""

from __future__ import annotations

import bisect
from array import array
from datetime import datetime, timedelta
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from .._database.driver import Connection
from .options import CleanupOptions
from .result import BatchOutcome
from .sql import (
    DISPATCH_ATTEMPT_PATTERNS,
    SQL_LOCK_TOKENS,
    SQL_MAX_TOKEN_ID,
    SQL_RETRY_ATTEMPTS,
    SQL_RUN_TOKEN_CANDIDATES,
    SQL_RUN_TOKEN_OWNERS,
    SQL_RUN_TOKEN_SCOPE,
    SQL_TOKEN_CANDIDATES,
    SQL_TOKEN_CANDIDATES_BY_ID,
    SQL_TOKEN_OTHER_OWNERS,
    SQL_USER_IDS,
    BatchJob,
)


class TokenCandidate(NamedTuple):
    """A token in a job's window (SQL_TOKEN_CANDIDATES)."""

    id: int
    uuid: str
    user_uuid: str
    created_at: datetime


# How long after its `dispatch` row of an attempt crunch-dispatch.rb makes a job's token: in
# the same pass of start_jobs, nodes_available_for_job_now saves the row and get_authorization
# the token, both stamped by the API server's clock (1.4.3 crunch_dispatch.rb:184-191,
# :369), milliseconds apart; ten seconds leave room for a loaded host.
RETRY_TOKEN_SLACK = timedelta(seconds=10)

# A span of instants at which the dispatcher may have made a job's token, for one user.
Window = Tuple[str, datetime, datetime]


def start_window(job: BatchJob) -> Optional[Window]:
    """[created_at, started_at] for the user that locked the job: its first token, kept
    across tempfails, was made for that user before crunch-job locked the job with it."""
    if job.started_at is None or job.is_locked_by_uuid is None:
        return None
    return (job.is_locked_by_uuid, job.created_at, job.started_at)


class TokenPlan:
    """A batch's tokens: those to revoke, and those another's work could own, with it."""

    def __init__(
        self,
        to_revoke: Iterable[TokenCandidate] = (),
        left_alone: Iterable[Tuple[TokenCandidate, str]] = (),
        retry_windows: Optional[Dict[str, List[Window]]] = None,
    ) -> None:
        self.to_revoke = list(to_revoke)
        # Each with the uuid of the job or pipeline instance that could own it.
        self.left_alone = list(left_alone)
        # By job uuid, the windows of its dispatches after its start (token_windows).
        self.retry_windows = retry_windows or {}

    def windows(self, job: BatchJob) -> List[Window]:
        first = start_window(job)
        return ([first] if first else []) + self.retry_windows.get(job.uuid, [])

    def holds(self, job: BatchJob, token: TokenCandidate) -> bool:
        """Whether `token` was made in one of `job`'s windows, for that window's user."""
        return any(
            user == token.user_uuid and opens <= token.created_at <= closes for user, opens, closes in self.windows(job)
        )

    def set_aside_for(self, held: Sequence[TokenCandidate], jobs: Iterable[BatchJob]) -> List[str]:
        """The uuids of `jobs` whose window holds a token of `held` (another transaction
        holds its row); those tokens are not revoked by this batch."""
        held_ids = set(token.id for token in held)
        self.to_revoke = [token for token in self.to_revoke if token.id not in held_ids]
        return [job.uuid for job in jobs if any(self.holds(job, token) for token in held)]

    def report(self, ended: Iterable[BatchJob], outcome: BatchOutcome) -> BatchOutcome:
        """`outcome` with the tokens of the `ended` jobs added: to revoke, and left alone.
        A token only a set-aside job's window holds waits for that job's next try."""
        windows = JobWindows(window for job in ended for window in self.windows(job))
        tokens = [t.uuid for t in self.to_revoke if windows.contain(t.user_uuid, t.created_at)]
        left_alone = [
            {"uuid": t.uuid, "user_uuid": t.user_uuid, "could_belong_to": owner}
            for t, owner in self.left_alone
            if windows.contain(t.user_uuid, t.created_at)
        ]
        return outcome._replace(
            tokens=list(outcome.tokens) + tokens, tokens_left_alone=list(outcome.tokens_left_alone) + left_alone
        )

    def ids(self, uuids: Iterable[str]) -> List[int]:
        wanted = set(uuids)
        return [token.id for token in self.to_revoke if token.uuid in wanted]


class JobWindows:
    """The time windows [created_at, started_at] of jobs, by user, for telling whether an
    instant falls inside one of a user's windows in O(log n).

    A job without a user or a start has no window (the caller leaves it out).
    """

    def __init__(self, windows: Iterable[Tuple[Any, datetime, datetime]]) -> None:
        by_user: Dict[Any, List[Tuple[datetime, datetime]]] = {}
        for user_id, created_at, started_at in windows:
            by_user.setdefault(user_id, []).append((created_at, started_at))
        self._starts: Dict[Any, List[datetime]] = {}
        self._reach: Dict[Any, List[datetime]] = {}
        for user_id, spans in by_user.items():
            spans.sort()
            self._starts[user_id] = [start for start, _end in spans]
            # The latest end among the windows that open at or before each one: an instant
            # is inside some window exactly when the last window opening before it reaches it.
            reach: List[datetime] = []
            latest: Optional[datetime] = None
            for _start, end in spans:
                latest = end if latest is None or end > latest else latest
                reach.append(latest)
            self._reach[user_id] = reach

    def __len__(self) -> int:
        return len(self._starts)

    def bounds(self) -> Dict[str, List[Any]]:
        """Per user, the span from the earliest window start to the latest end."""
        users = sorted(self._starts)
        return {
            "user_ids": users,
            "lo": [self._starts[u][0] for u in users],
            "hi": [self._reach[u][-1] for u in users],
        }

    def contain(self, user_id: Any, instant: datetime) -> bool:
        starts = self._starts.get(user_id)
        if not starts:
            return False
        index = bisect.bisect_right(starts, instant) - 1
        return index >= 0 and self._reach[user_id][index] >= instant


EPOCH = datetime(1970, 1, 1)
MICROSECOND = timedelta(microseconds=1)


def micros(instant: datetime) -> int:
    """`instant` as SQL_RUN_TOKEN_CANDIDATES counts it: microseconds since 1970."""
    return (instant - EPOCH) // MICROSECOND


def merged_spans(spans: Iterable[Tuple[Any, datetime, datetime]]) -> List[Tuple[Any, int, int]]:
    """`spans` (user, opens, closes) as few disjoint ones per user, in microseconds: a
    batch's windows of one user overlap, and each would look up the same tokens again."""
    merged: List[Tuple[Any, int, int]] = []
    for user, opens, closes in sorted((user, micros(o), micros(c)) for user, o, c in spans if o <= c):
        if merged and merged[-1][0] == user and opens <= merged[-1][2]:
            merged[-1] = (user, merged[-1][1], max(closes, merged[-1][2]))
        else:
            merged.append((user, opens, closes))
    return merged


class KeptTokens:
    """The tokens a run at boot may revoke, read once (SQL_RUN_TOKEN_CANDIDATES): per user
    id, their creations (microseconds) in order and their ids, 16 bytes a token.

    A batch then asks the database for the tokens of its windows by id
    (SQL_TOKEN_CANDIDATES_BY_ID), and for those made since the read, instead of every
    token of its users over their windows' whole span: in start order a batch holds every
    user's jobs, so that read would cover nearly every user's tokens in each batch
    (bench/README.md, "Start order at boot").
    """

    def __init__(self, users: Iterable[Tuple[int, Sequence[int], Sequence[int]]], read_up_to: int) -> None:
        self._made: Dict[int, array] = {}
        self._ids: Dict[int, array] = {}
        for user_id, ids, made in users:
            self._ids[user_id] = array("q", ids)
            self._made[user_id] = array("q", made)
        # The highest token id when the run read them: any token made since has a higher one.
        self.read_up_to = read_up_to

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._ids.values())

    def within(self, spans: Iterable[Tuple[int, datetime, datetime]]) -> List[int]:
        """The ids of the kept tokens made inside `spans` (user id, opens, closes), edges included."""
        found: List[int] = []
        for user_id, opens, closes in merged_spans(spans):
            made = self._made.get(user_id)
            if made is not None:
                found.extend(self._ids[user_id][bisect.bisect_left(made, opens) : bisect.bisect_right(made, closes)])
        return found

    @classmethod
    def read(cls, conn: Connection, user_uuids: Sequence[str], first_made: datetime) -> KeptTokens:
        read_up_to = conn.execute(SQL_MAX_TOKEN_ID).fetchone()[0]
        params = {"user_uuids": list(user_uuids), "first_made": first_made}
        return cls(conn.execute(SQL_RUN_TOKEN_CANDIDATES, params), read_up_to)


class TokenOwners:
    """Who else could own each token a run may revoke, judged once as the run starts.

    SQL_TOKEN_OTHER_OWNERS reads the jobs table whole (no index serves the users' columns),
    and a run of many batches read it once a batch: 46 s of a 1,000,000-job run's 240 s
    (bench/README.md, "Whose pages the WAL holds"). Judged once, for every token the run's
    jobs' windows can hold, it is read once. What may change during the run only keeps more
    tokens: work that starts later cannot own a token made before it, and a job that ends
    meanwhile reached past the tokens made before. A token this did not judge (made during
    the run, in a window after a retry) is judged by its batch as before. The same read
    keeps the tokens themselves (KeptTokens), for the batches to find theirs by id.
    """

    def __init__(self, judged: Iterable[int], owners: Dict[int, str], kept: Optional[KeptTokens] = None) -> None:
        self._judged = array("q", sorted(judged))
        self.owners = owners
        self.kept = kept

    def __len__(self) -> int:
        return len(self._judged)

    def judged(self, token_id: int) -> bool:
        index = bisect.bisect_left(self._judged, token_id)
        return index < len(self._judged) and self._judged[index] == token_id

    @classmethod
    def read(cls, conn: Connection, options: CleanupOptions) -> TokenOwners:
        """Judge every token the jobs `options` ends can hold: three reads of jobs in all,
        the tokens read on the server, and only their ids and owners kept (8 bytes a token
        judged; 400,000 of them as TokenCandidates took 130 MiB)."""
        users, opens, now = conn.execute(SQL_RUN_TOKEN_SCOPE, run_params(options)).fetchone()
        if not users:
            return cls((), {})
        params = dict(run_params(options), user_uuids=users, first_made=opens, last_made=now, batch=[])
        params.update(DISPATCH_ATTEMPT_PATTERNS)
        judged = array("q")
        owners: Dict[int, str] = {}
        for token_id, owner in conn.execute(SQL_RUN_TOKEN_OWNERS, params):
            judged.append(token_id)
            if owner is not None:
                owners[token_id] = owner
        return cls(judged, owners, KeptTokens.read(conn, users, opens))


def plan_tokens(
    conn: Connection,
    options: CleanupOptions,
    jobs: Sequence[BatchJob],
    batch: Sequence[str],
    owners: Optional[TokenOwners] = None,
) -> TokenPlan:
    """The tokens in `jobs`' windows: those to revoke, and those another's work could
    own (SQL_TOKEN_OTHER_OWNERS, or the run's `owners` where it judged them), to leave
    alone and report."""
    retry_windows = token_windows_after_start(conn, jobs)
    plan = TokenPlan(retry_windows=retry_windows)
    spans = [window for job in jobs for window in plan.windows(job)]
    candidates = token_candidates(conn, spans, owners.kept if owners is not None else None)
    others = owners_of(conn, options, candidates, batch, owners)
    plan.to_revoke = [token for token in candidates if token.id not in others]
    plan.left_alone = [(token, others[token.id]) for token in candidates if token.id in others]
    return plan


def token_windows_after_start(conn: Connection, jobs: Sequence[BatchJob]) -> Dict[str, List[Window]]:
    """By job uuid, a window after each `dispatch` row of an attempt written after the job
    started, for the user the job's modified_by_user_uuid names. After a node failure (exit
    93) crunch-dispatch.rb dispatches the job again, still Running, and get_authorization
    makes it a new token if modified_by_user_uuid changed meanwhile (an admin changed its
    priority: 1.4.3 crunch_dispatch.rb:259-279, :678-693), made for that user after the
    start, outside the job's first window."""
    started = [job.uuid for job in jobs if job.started_at is not None]
    if not started:
        return {}
    found: Dict[str, List[Window]] = {}
    params = dict(DISPATCH_ATTEMPT_PATTERNS, uuids=started)
    for job_uuid, user_uuid, dispatched in conn.execute(SQL_RETRY_ATTEMPTS, params).fetchall():
        found.setdefault(job_uuid, []).append((user_uuid, dispatched, dispatched + RETRY_TOKEN_SLACK))
    return found


def lock_tokens(conn: Connection, tokens: Sequence[TokenCandidate]) -> Tuple[List[TokenCandidate], Set[int]]:
    """Lock `tokens` for this batch: those another transaction holds, left unlocked, and the
    ids of the locked ones whose scopes are YAML text (SQL_LOCK_TOKENS)."""
    if not tokens:
        return [], set()
    rows = conn.execute(SQL_LOCK_TOKENS, {"ids": [t.id for t in tokens]}).fetchall()
    got = set(token_id for token_id, _yaml in rows)
    return [token for token in tokens if token.id not in got], set(token_id for token_id, yaml in rows if yaml)


def token_candidates(
    conn: Connection, spans: Sequence[Window], kept: Optional[KeptTokens] = None
) -> List[TokenCandidate]:
    """The tokens made in the windows `spans`, each for its window's user: found among the
    run's `kept` ones where it read them, else by the users' tokens over their windows."""
    users = sorted(set(user for user, _opens, _closes in spans))
    user_ids = dict(conn.execute(SQL_USER_IDS, {"uuids": users}).fetchall()) if users else {}
    by_id = [(user_ids[user], opens, closes) for user, opens, closes in spans if user in user_ids]
    windows = JobWindows(by_id)
    if not windows:
        return []
    user_uuids = dict((user_id, user_uuid) for user_uuid, user_id in user_ids.items())
    if kept is None:
        candidates = conn.execute(SQL_TOKEN_CANDIDATES, windows.bounds()).fetchall()
    else:
        params = {"ids": kept.within(by_id), "read_up_to": kept.read_up_to, "user_ids": sorted(user_uuids)}
        candidates = conn.execute(SQL_TOKEN_CANDIDATES_BY_ID, params).fetchall()
    return [
        TokenCandidate(token_id, uuid, user_uuids[user_id], created_at)
        for token_id, uuid, user_id, created_at in candidates
        if windows.contain(user_id, created_at)
    ]


def owners_of(
    conn: Connection,
    options: CleanupOptions,
    candidates: Sequence[TokenCandidate],
    batch: Sequence[str],
    owners: Optional[TokenOwners],
) -> Dict[int, str]:
    """other_owners of `candidates`, from the run's `owners` for those it judged."""
    if owners is None:
        return other_owners(conn, options, candidates, batch) if candidates else {}
    found = dict((c.id, owners.owners[c.id]) for c in candidates if c.id in owners.owners)
    unjudged = [c for c in candidates if not owners.judged(c.id)]
    if unjudged:
        found.update(other_owners(conn, options, unjudged, batch))
    return found


def run_params(options: CleanupOptions) -> Dict[str, Any]:
    """The parameters of SQL_ENDED_BY_RUN: which jobs `options` ends."""
    return {
        "run_uuids": options.uuids,
        "every_row": options.uuids is not None or options.full_scan,
        "before": options.db_before,
    }


def other_owners(
    conn: Connection, options: CleanupOptions, candidates: Sequence[TokenCandidate], batch: Sequence[str]
) -> Dict[int, str]:
    """{token id: uuid of a job or pipeline instance, not ended by this run, that could own it}."""
    made = [c.created_at for c in candidates]
    params = {
        "ids": [c.id for c in candidates],
        "users": [c.user_uuid for c in candidates],
        "made": made,
        # The same bounds as constants, for the one pass over jobs: the planner hashes a
        # constant array and can weigh a range on the started_at index.
        "user_uuids": sorted(set(c.user_uuid for c in candidates)),
        "first_made": min(made),
        "last_made": max(made),
        "batch": list(batch),
    }
    params.update(run_params(options))
    params.update(DISPATCH_ATTEMPT_PATTERNS)
    return dict(conn.execute(SQL_TOKEN_OTHER_OWNERS, params).fetchall())
