"""The run's one judgement of who else could own its tokens (TokenOwners), and how a
batch uses it: the statements each case sends, on a scripted connection."""

from __future__ import annotations

from datetime import datetime, timedelta

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import (
    SQL_RUN_TOKEN_OWNERS,
    SQL_RUN_TOKEN_SCOPE,
    SQL_TOKEN_OTHER_OWNERS,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.tokens import (
    TokenCandidate,
    TokenOwners,
    owners_of,
)

T0 = datetime(2026, 12, 4, 12, 0, 0)
USER = "zzzzz-tpzed-%015d"
SIBLING = "zzzzz-8i9sb-000000000000009"


def token(number, user=1):
    return TokenCandidate(number, "zzzzz-gj3su-%015d" % number, USER % user, T0 + timedelta(minutes=number))


class Rows:
    def __init__(self, rows):
        self.rows = rows

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return list(self.rows)

    def __iter__(self):
        return iter(self.rows)


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
        }
    )

    owners = TokenOwners.read(conn, CleanupOptions(full_scan=False))

    assert [query for query, _params in conn.sent] == [SQL_RUN_TOKEN_SCOPE, SQL_RUN_TOKEN_OWNERS]
    scope, judged = [params for _query, params in conn.sent]
    assert scope == {"run_uuids": None, "every_row": False, "threshold": None}
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
