"""The run's one judgement of who else could own its tokens (TokenOwners), and how a
batch uses it: the statements each case sends, on a scripted connection."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import sql as cleanup_sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import tokens as cleanup_tokens
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import (
    CleanupOptions,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import (
    SQL_MAX_TOKEN_ID,
    SQL_RUN_TOKEN_CANDIDATES,
    SQL_RUN_TOKEN_OWNERS,
    SQL_RUN_TOKEN_SCOPE,
    SQL_TOKEN_CANDIDATES,
    SQL_TOKEN_CANDIDATES_BY_ID,
    SQL_TOKEN_OTHER_OWNERS,
    SQL_USER_IDS,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.tokens import (
    KeptTokens,
    TokenCandidate,
    TokenOwners,
    micros,
    owners_of,
    token_candidates,
)
from tests.unit.plugins.module_utils.pg_fakes import Rows

JOB = "zzzzz-8i9sb-%015d"

T0 = datetime(2026, 12, 4, 12, 0, 0)
USER = "zzzzz-tpzed-%015d"
SIBLING = "zzzzz-8i9sb-000000000000009"


def token(number, user=1):
    return TokenCandidate(number, "zzzzz-gj3su-%015d" % number, USER % user, T0 + timedelta(minutes=number))


class Scripted:
    """Answers each statement from `answers` ({statement: callable(params) -> rows})."""

    def __init__(self, answers):
        self.answers = answers
        self.sent = []

    def execute(self, query, params=None):
        self.sent.append((query, params))
        return Rows(self.answers[query](params))


def test_judged_is_exactly_the_tokens_read():
    owners = TokenOwners([30, 10, 20], {20: SIBLING})
    assert [owners.judged(n) for n in (5, 10, 15, 20, 30, 31)] == [False, True, False, True, True, False]
    assert len(owners) == 3
    assert not TokenOwners((), {}).judged(10)


def test_the_run_judges_its_users_tokens_in_one_statement_and_keeps_only_the_owned():
    conn = Scripted(
        {
            SQL_RUN_TOKEN_SCOPE: lambda params: [([USER % 1, USER % 2], T0, T0 + timedelta(hours=1))],
            SQL_RUN_TOKEN_OWNERS: lambda params: [(3, None), (2, SIBLING), (1, None)],
            SQL_MAX_TOKEN_ID: lambda params: [(9,)],
            SQL_RUN_TOKEN_CANDIDATES: lambda params: [(51, [2, 1], [micros(T0), micros(T0) + 5]), (52, [3], [7])],
        }
    )

    owners = TokenOwners.read(conn, CleanupOptions(full_scan=False))

    assert [query for query, _params in conn.sent] == [
        SQL_RUN_TOKEN_SCOPE,
        SQL_RUN_TOKEN_OWNERS,
        SQL_MAX_TOKEN_ID,
        SQL_RUN_TOKEN_CANDIDATES,
    ]
    scope, judged, _max, kept = [params for _query, params in conn.sent]
    # The same tokens as judged: the run's users', made from the earliest window on.
    assert kept == {"user_uuids": [USER % 1, USER % 2], "first_made": T0}
    assert len(owners.kept) == 3 and owners.kept.read_up_to == 9
    assert scope == {"run_uuids": None, "every_row": False, "before": None}
    # As a batch asks, with no batch of its own (the run's jobs are all still Running), for
    # the tokens of the run's users made from the earliest window to now.
    assert judged["user_uuids"] == [USER % 1, USER % 2] and judged["batch"] == []
    assert (judged["first_made"], judged["last_made"]) == (T0, T0 + timedelta(hours=1))
    assert owners.owners == {2: SIBLING} and all(owners.judged(n) for n in (1, 2, 3))


def test_a_run_whose_jobs_name_no_user_reads_no_token():
    conn = Scripted({SQL_RUN_TOKEN_SCOPE: lambda params: [([], None, T0)]})
    owners = TokenOwners.read(conn, CleanupOptions())
    assert [query for query, _params in conn.sent] == [SQL_RUN_TOKEN_SCOPE]
    assert len(owners) == 0


def test_a_batch_asks_the_statement_only_of_the_tokens_the_run_did_not_judge():
    owners = TokenOwners([1, 2], {2: SIBLING})
    conn = Scripted({SQL_TOKEN_OTHER_OWNERS: lambda params: [(4, "zzzzz-d1hrv-000000000000001")]})

    assert owners_of(conn, CleanupOptions(), [token(1), token(2)], ["b"], owners) == {2: SIBLING}
    assert conn.sent == []

    found = owners_of(conn, CleanupOptions(), [token(1), token(2), token(3), token(4)], ["b"], owners)

    assert found == {2: SIBLING, 4: "zzzzz-d1hrv-000000000000001"}
    [(query, params)] = conn.sent
    assert query == SQL_TOKEN_OTHER_OWNERS and params["ids"] == [3, 4] and params["batch"] == ["b"]


def test_without_the_runs_judgement_a_batch_asks_of_every_token_and_of_none_without_tokens():
    conn = Scripted({SQL_TOKEN_OTHER_OWNERS: lambda params: []})
    assert owners_of(conn, CleanupOptions(), [], ["b"], None) == {}
    assert conn.sent == []
    assert owners_of(conn, CleanupOptions(), [token(1), token(2)], ["b"], None) == {}
    assert [params["ids"] for _query, params in conn.sent] == [[1, 2]]


def _at(minute):
    return datetime(2026, 1, 1) + timedelta(minutes=minute)


def test_a_token_belongs_to_a_window_of_its_own_user_only():
    windows = cleanup_tokens.JobWindows([(1, _at(0), _at(10)), (2, _at(20), _at(30))])
    assert windows.contain(1, _at(5)) and windows.contain(2, _at(25))
    assert not windows.contain(2, _at(5)) and not windows.contain(1, _at(25))
    assert not windows.contain(3, _at(5))


def test_window_edges_are_inside_and_gaps_between_windows_outside():
    windows = cleanup_tokens.JobWindows([(1, _at(0), _at(10)), (1, _at(20), _at(30))])
    assert windows.contain(1, _at(0)) and windows.contain(1, _at(10))
    assert windows.contain(1, _at(20)) and windows.contain(1, _at(30))
    assert not windows.contain(1, _at(15))
    assert not windows.contain(1, _at(-1)) and not windows.contain(1, _at(31))


def test_a_long_window_covers_the_short_ones_opening_inside_it():
    # Sorted by start, the short window (5, 6) comes last; an instant after it is still
    # inside the long window that opened before it.
    windows = cleanup_tokens.JobWindows([(1, _at(0), _at(100)), (1, _at(5), _at(6))])
    assert windows.contain(1, _at(50))
    assert not windows.contain(1, _at(101))


def test_bounds_span_each_users_windows():
    windows = cleanup_tokens.JobWindows([(2, _at(20), _at(30)), (1, _at(5), _at(6)), (1, _at(0), _at(3))])
    assert windows.bounds() == {"user_ids": [1, 2], "lo": [_at(0), _at(20)], "hi": [_at(6), _at(30)]}
    assert len(windows) == 2
    assert len(cleanup_tokens.JobWindows([])) == 0


def test_windows_agree_with_a_plain_scan_of_every_window():
    rng = random.Random(7)
    spans = []
    for _index in range(200):
        start = rng.randint(0, 1000)
        spans.append((rng.randint(1, 5), _at(start), _at(start + rng.randint(0, 60))))
    windows = cleanup_tokens.JobWindows(spans)
    for user in range(1, 6):
        for minute in range(-5, 1070, 3):
            expected = any(u == user and lo <= _at(minute) <= hi for u, lo, hi in spans)
            assert windows.contain(user, _at(minute)) is expected, (user, minute)


class OwnersConnection:
    """Answers SQL_TOKEN_OTHER_OWNERS with `rows`; records its parameters."""

    def __init__(self, rows):
        self.rows = rows
        self.params = []

    def execute(self, query, params=None):
        assert query == cleanup_sql.SQL_TOKEN_OTHER_OWNERS
        self.params.append(params)
        return Rows(self.rows)


def test_other_owners_asks_once_for_all_tokens_with_their_users_and_span():
    """One statement per batch (issue 21): the tokens as arrays, and what bounds the one
    pass over jobs as constants: the batch's users once each, the first and last token."""
    user_a, user_b = "zzzzz-tpzed-%015d" % 1, "zzzzz-tpzed-%015d" % 2
    tokens = [
        cleanup_tokens.TokenCandidate(11, "zzzzz-gj3su-%015d" % 11, user_b, _at(30)),
        cleanup_tokens.TokenCandidate(12, "zzzzz-gj3su-%015d" % 12, user_a, _at(5)),
        cleanup_tokens.TokenCandidate(13, "zzzzz-gj3su-%015d" % 13, user_b, _at(50)),
    ]
    conn = OwnersConnection([(12, JOB % 7)])
    options = CleanupOptions(uuids=[JOB % 1, JOB % 2])

    owners = cleanup_tokens.other_owners(conn, options, tokens, [JOB % 1])

    assert owners == {12: JOB % 7}
    assert conn.params == [
        {
            "ids": [11, 12, 13],
            "users": [user_b, user_a, user_b],
            "made": [_at(30), _at(5), _at(50)],
            "user_uuids": [user_a, user_b],
            "first_made": _at(5),
            "last_made": _at(50),
            "batch": [JOB % 1],
            "run_uuids": [JOB % 1, JOB % 2],
            "every_row": True,
            "before": None,
            "attempt_summary": "dispatching to %",
        }
    ]


def test_micros_counts_from_1970_as_the_database_does():
    assert micros(datetime(1970, 1, 1)) == 0
    assert micros(datetime(1970, 1, 2, 0, 0, 1, 5)) == 86401000005
    assert micros(datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1


def test_kept_tokens_within_windows_edges_included_each_once():
    kept = KeptTokens(
        [(1, [10, 11, 12, 13], [micros(_at(m)) for m in (0, 10, 20, 30)]), (2, [20], [micros(_at(5))])], 99
    )
    assert kept.within([(1, _at(0), _at(10))]) == [10, 11]
    # Overlapping windows of a user find a token once; another user's window, only its own.
    assert sorted(kept.within([(1, _at(5), _at(20)), (1, _at(15), _at(30)), (2, _at(0), _at(30))])) == [11, 12, 13, 20]
    assert kept.within([(1, _at(1), _at(9)), (3, _at(0), _at(30))]) == []
    # A window that closes before it opens holds nothing, as in JobWindows.
    assert kept.within([(1, _at(20), _at(0))]) == []
    assert len(kept) == 5


def test_kept_tokens_agree_with_a_plain_scan_of_every_window():
    rng = random.Random(11)
    made = {user: sorted(rng.sample(range(0, 2000), 300)) for user in (1, 2, 3)}
    ids = {user: [user * 10000 + minute for minute in made[user]] for user in made}
    kept = KeptTokens([(user, ids[user], [micros(_at(m)) for m in made[user]]) for user in made], 0)
    for _round in range(50):
        spans = []
        for _index in range(rng.randint(1, 30)):
            start = rng.randint(-10, 2000)
            spans.append((rng.randint(1, 4), _at(start), _at(start + rng.randint(0, 90))))
        expected = sorted(
            ids[user][i]
            for user in made
            for i, m in enumerate(made[user])
            if any(u == user and lo <= _at(m) <= hi for u, lo, hi in spans)
        )
        found = kept.within(spans)
        assert sorted(found) == expected and len(found) == len(set(found))


def _candidates_connection(rows):
    return Scripted(
        {
            SQL_USER_IDS: lambda params: [(USER % 1, 1), (USER % 2, 2)],
            SQL_TOKEN_CANDIDATES: lambda params: rows,
            SQL_TOKEN_CANDIDATES_BY_ID: lambda params: rows,
        }
    )


def test_a_batch_of_a_run_that_kept_its_tokens_asks_by_id_and_for_tokens_made_since():
    kept = KeptTokens([(1, [10, 11, 12], [micros(_at(m)) for m in (0, 10, 20)]), (2, [20], [micros(_at(5))])], 30)
    # What the database answers: 11 among those read, 31 made since (inside the window), 32
    # made since outside every window.
    conn = _candidates_connection([(11, "t11", 1, _at(10)), (31, "t31", 1, _at(12)), (32, "t32", 2, _at(50))])

    found = token_candidates(conn, [(USER % 1, _at(5), _at(15)), (USER % 3, _at(0), _at(99))], kept)

    assert [query for query, _params in conn.sent] == [SQL_USER_IDS, SQL_TOKEN_CANDIDATES_BY_ID]
    assert conn.sent[1][1] == {"ids": [11], "read_up_to": 30, "user_ids": [1, 2]}
    assert found == [TokenCandidate(11, "t11", USER % 1, _at(10)), TokenCandidate(31, "t31", USER % 1, _at(12))]


def test_without_kept_tokens_a_batch_reads_its_users_tokens_over_their_span():
    conn = _candidates_connection([(11, "t11", 1, _at(10)), (12, "t12", 1, _at(20))])

    found = token_candidates(conn, [(USER % 1, _at(5), _at(15))])

    assert [query for query, _params in conn.sent] == [SQL_USER_IDS, SQL_TOKEN_CANDIDATES]
    assert conn.sent[1][1] == {"user_ids": [1], "lo": [_at(5)], "hi": [_at(15)]}
    assert found == [TokenCandidate(11, "t11", USER % 1, _at(10))]
