# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""A batch's bulk settings (raised only, never for the last batch's GIN pending list) and
the run's one lock budget. The batch's transaction itself runs in test_engine_locks.py
with fakes and in tests/integration on the lab's PostgreSQL."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.batch import (
    MAX_LOCK_TIMEOUT_MS,
    LockBudget,
    bulk_settings,
)


def test_bulk_settings_raise_and_the_last_batch_keeps_the_servers_gin_limit():
    server = {"gin_pending_list_limit": 4096, "work_mem": 4096}
    assert bulk_settings(server, last_batch=False) == {
        "gin_pending_list_limit": "262144kB",
        "work_mem": "65536kB",
    }
    assert bulk_settings(server, last_batch=True) == {"work_mem": "65536kB"}


def test_bulk_settings_never_lower_and_skip_what_the_server_lacks():
    generous = {"gin_pending_list_limit": 10**7, "work_mem": 10**7}
    assert bulk_settings(generous, last_batch=False) == {}
    assert bulk_settings({"work_mem": 4096}, last_batch=False) == {"work_mem": "65536kB"}
    assert bulk_settings({}, last_batch=False) == {}


def test_the_budget_is_spent_not_renewed_and_bounds_lock_timeout():
    budget = LockBudget(3.0)
    assert budget.lock_timeout_ms() == 3000
    budget.spend(1.25)
    assert budget.remaining() == pytest.approx(1.75) and budget.lock_timeout_ms() == 1750
    budget.spend(5)
    # 0 would mean "no bound" to PostgreSQL.
    assert budget.remaining() == 0 and budget.lock_timeout_ms() == 1
    assert LockBudget(1e9).lock_timeout_ms() == MAX_LOCK_TIMEOUT_MS


def test_a_wait_that_took_no_time_spends_nothing():
    budget = LockBudget(3.0)
    # A clock stepped back between two readings gives a negative wait.
    budget.spend(-2.0)
    assert budget.remaining() == 3.0
    budget.spend(2.9996)
    assert budget.lock_timeout_ms() == 1
