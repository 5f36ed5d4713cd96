# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The event source arvados_ops.recovery.findings with a fake read: its loop, what it puts
on the queue, and its documentation against the option table."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.extensions.eda.plugins.event_source import findings as source
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import findings, watch_cli

ORPHAN = "zzzzz-dz642-000000000000001"


def reconcile_result():
    return {
        "cluster_prefix": "zzzzz",
        "orphaned_containers": [{"uuid": ORPHAN, "state": "Locked"}],
        "dispatcher": {"lock_held": True, "lock_expected": True},
    }


class Reads:
    """run_reconcile's stand-in: each call the next of `outcomes` (a result or an error)."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.params = []

    def __call__(self, params):
        self.params.append(params)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def run(args, reads, count, unit_active=lambda unit, timeout: None, monkeypatch=None):
    engine = source.Engine(findings, watch_cli.reconcile_params, reads, unit_active, RecoveryError)
    queue: asyncio.Queue = asyncio.Queue()
    slept = []

    async def no_sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(source.asyncio, "sleep", no_sleep)
    asyncio.run(source.main(queue, args, engine=engine, reads=count))
    events = []
    while not queue.empty():
        events.append(queue.get_nowait())
    return events, slept


def test_two_reads_that_agree_put_one_event_and_the_interval_is_kept(monkeypatch):
    reads = Reads(reconcile_result(), reconcile_result(), reconcile_result())
    events, slept = run(
        {"interval": 30, "db_host": "db", "eda_feedback_queue": None}, reads, 3, monkeypatch=monkeypatch
    )
    assert [event["arvados_recovery"]["names"] for event in events] == [[ORPHAN]]
    # The source's own options and rulebook's are not the read's.
    assert reads.params[0]["db_host"] == "db" and "interval" not in reads.params[0]
    assert len(slept) == 2 and all(25 < seconds <= 30 for seconds in slept)


def test_failed_reads_are_events_not_the_end_of_the_source(monkeypatch):
    reads = Reads(RecoveryError("database gone"), RuntimeError("a bug"), reconcile_result())
    events, _slept = run({}, reads, 3, monkeypatch=monkeypatch)
    assert [event["arvados_recovery"]["finding"] for event in events] == ["read_failed"]
    assert events[0]["arvados_recovery"]["details"]["read"]["message"] == "a bug"


def test_the_dispatcher_unit_is_asked_only_after_a_good_read(monkeypatch):
    asked = []

    def unit_active(unit, timeout):
        asked.append((unit, timeout))
        return False

    events, _slept = run(
        {"dispatcher_unit": "crunch-dispatch-slurm.service"},
        Reads(reconcile_result(), RecoveryError("x"), reconcile_result(), reconcile_result()),
        4,
        unit_active,
        monkeypatch,
    )
    assert asked == [("crunch-dispatch-slurm.service", 10.0)] * 3
    assert [event["arvados_recovery"]["finding"] for event in events] == [
        "orphaned_containers",
        "dispatcher_not_running",
    ]


def test_a_bad_option_stops_the_source_before_its_first_read(monkeypatch):
    reads = Reads()
    with pytest.raises(ConfigError, match="interval"):
        run({"interval": "often"}, reads, 1, monkeypatch=monkeypatch)
    assert reads.params == []


def test_the_documentation_says_each_option_of_the_source_as_the_table_has_it():
    documented = yaml.safe_load(source.DOCUMENTATION)["options"]
    assert set(documented) == set(findings.SOURCE_OPTIONS)
    for name, option in findings.SOURCE_OPTIONS.items():
        assert (documented[name]["type"], documented[name].get("default")) == (option.type, option.default), name
    description = " ".join(yaml.safe_load(source.DOCUMENTATION)["description"])
    for kind in findings.KINDS:
        assert "C(%s)" % kind in description
    yaml.safe_load(source.EXAMPLES)
