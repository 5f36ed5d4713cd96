# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An orphaned Locked container's lock: whose token, how many dispatch attempts left, the fix."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.settings import cluster_setting
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.locked_containers import (
    UNKNOWN_LIMIT,
    DispatchLimit,
    LockToken,
    default_limit,
    diagnose,
    locks_line,
    system_root_token_uuid,
    token_state,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.run import dispatch_limit

P = "zzzzz"
CTR = P + "-dz642-aaaaaaaaaaaaaaa"
ROOT = P + "-gj3su-000000000000000"
OTHER_TOKEN = P + "-gj3su-0123456789abcde"
LIMIT = DispatchLimit(5, "Arvados 2.6.3's default")


def entry(locked_by, state="Locked"):
    return {"uuid": CTR, "state": state, "locked_by_uuid": locked_by}


def lock_of(locked_by, token, limit=LIMIT):
    entries = [entry(locked_by)]
    diagnose(entries, {CTR: token} if token else {}, P, limit)
    return entries[0]["lock"]


def test_the_system_root_token_has_no_row_and_is_never_missing():
    assert system_root_token_uuid(P) == ROOT
    # check_system_root_token makes it up: the join finds no row.
    lock = lock_of(ROOT, LockToken(CTR, 2, False, None, None, False))
    assert lock["token"] == "system_root_token"
    assert (lock["lock_count"], lock["max_dispatch_attempts"], lock["dispatch_attempts_left"]) == (2, 5, 3)
    assert "start the container dispatcher" in lock["action"] and "3 dispatch attempts left" in lock["action"]
    assert "/arvados/v1/containers/%s/unlock" % CTR in lock["action"]


def test_an_exhausted_lock_count_says_not_to_unlock():
    lock = lock_of(ROOT, LockToken(CTR, 5, False, None, None, False))
    assert lock["dispatch_attempts_left"] == 0
    assert "do not unlock it: lock_count 5 has reached MaxDispatchAttempts 5" in lock["action"]


def test_an_unknown_limit_is_said():
    lock = lock_of(ROOT, LockToken(CTR, 5, False, None, None, False), UNKNOWN_LIMIT)
    assert lock["max_dispatch_attempts"] is None and lock["dispatch_attempts_left"] is None
    assert "MaxDispatchAttempts unknown" in lock["action"]


@pytest.mark.parametrize(
    "token, state, words",
    [
        (None, "missing", "is gone"),
        (LockToken(CTR, 1, False, None, None, False), "missing", "is gone"),
        (LockToken(CTR, 1, True, P + "-tpzed-a", "2026-01-01T00:00:00", True), "expired", "is expired"),
        (LockToken(CTR, 1, True, P + "-tpzed-a", None, False), "another", "its user zzzzz-tpzed-a"),
    ],
)
def test_a_token_of_another_gone_or_expired(token, state, words):
    lock = lock_of(OTHER_TOKEN, token)
    assert lock["token"] == state and words in lock["action"]
    if state != "another":
        assert "PATCH /arvados/v1/containers/%s with state Cancelled" % CTR in lock["action"]


def test_running_orphans_are_left_as_they_are():
    entries = [entry(ROOT, "Running")]
    diagnose(entries, {}, P, LIMIT)
    assert "lock" not in entries[0]
    assert token_state(None, None, P) == "missing"


def test_the_default_limit_follows_the_release():
    assert default_limit((2, 6, 3)) == DispatchLimit(5, "Arvados 2.6.3's default")
    assert default_limit((2, 7, 0)).value == 10
    assert default_limit((3, 2, 1)).value == 10
    assert default_limit((1, 4, 3)).value == 5
    assert default_limit((1, 3, 0)) == UNKNOWN_LIMIT


def test_config_yml_wins_over_the_release_default(tmp_path):
    config = tmp_path / "config.yml"
    config.write_text("Clusters:\n  zzzzz:\n    Containers:\n      MaxDispatchAttempts: 3\n")
    params = {"config_file": str(config)}
    assert cluster_setting(params, ("Containers", "MaxDispatchAttempts")) == (
        "3",
        "config_file %s, Clusters.zzzzz.Containers.MaxDispatchAttempts" % config,
    )
    assert dispatch_limit(params, (3, 2, 1)).value == 3
    config.write_text("Clusters:\n  zzzzz:\n    Containers: {}\n")
    assert dispatch_limit(params, (3, 2, 1)) == DispatchLimit(10, "Arvados 3.2.1's default")
    config.chmod(0)
    unreadable = {"config_file": str(tmp_path / "missing.yml")}
    assert dispatch_limit(unreadable, None) == UNKNOWN_LIMIT
    assert dispatch_limit({"config_file": "", "database_yml": ""}, (2, 0, 0)).value == 5


def test_the_summary_line_gives_each_locked_containers_lock_and_fix():
    entries = [entry(ROOT), entry(ROOT, "Running")]
    diagnose(entries, {CTR: LockToken(CTR, 2, False, None, None, False)}, P, LIMIT)
    line = locks_line(entries, LIMIT.describe())
    assert line.startswith("1 orphaned Locked containers (MaxDispatchAttempts from Arvados 2.6.3's default): ")
    assert "%s: token system_root_token, lock_count 2 of 5: start the container dispatcher" % CTR in line
    assert locks_line(entries[1:], None) == "No orphaned Locked container"
