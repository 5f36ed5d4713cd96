"""datagen.container_rows: the containers of the reconciliation benchmark."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import is_uuid_of
from lab import datagen

NOW = datetime(2026, 11, 30, 12, 0, 0)


def test_live_containers_come_first_and_hold_the_dispatcher_lock():
    rows, kept = datagen.container_rows("zzzzz", 40, 10, NOW, first_id=7, seed=3, finished_keep=5)
    rows = [row.as_dict() for row in rows]
    states = Counter(row["state"] for row in rows)
    assert states == {"Running": 5, "Locked": 5, "Complete": 27, "Cancelled": 3}
    assert [row["uuid"] for row in rows[:10]] == kept.live
    assert [row["uuid"] for row in rows[10:15]] == kept.finished
    assert {row["locked_by_uuid"] for row in rows[:10]} == {"zzzzz-gj3su-000000000000000"}
    assert all(row["locked_by_uuid"] is None and row["priority"] == 0 for row in rows[10:])
    assert all(row["started_at"] is None for row in rows[:10] if row["state"] == "Locked")
    assert [row["id"] for row in rows] == list(range(7, 47))
    assert all(is_uuid_of("container", row["uuid"]) for row in rows)


def test_the_same_seed_gives_the_same_containers():
    first = [row.values for row in datagen.container_rows("zzzzz", 5, 2, NOW, 1, seed=9)[0]]
    again = [row.values for row in datagen.container_rows("zzzzz", 5, 2, NOW, 1, seed=9)[0]]
    assert first == again


def test_more_live_than_containers_is_refused():
    with pytest.raises(ValueError, match="live"):
        datagen.container_rows("zzzzz", 3, 4, NOW, 1)
