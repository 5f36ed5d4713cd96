# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dispatchers' state from the lock, the units and the processes: every combination.

The rules follow 3.2.1 (and 2.5.0, 2.7.4) services/crunch-dispatch-slurm/crunch-dispatch-slurm.go,
lib/dispatchcloud/dispatcher.go and lib/lsf/dispatch.go: dblock.Dispatch.Lock once at start,
nothing calls Check(), so a free lock does not mean that no dispatcher runs; and 1.4.3
services/api/lib/crunch_dispatch.rb for crunch-dispatch.rb, which takes no lock at all.
"""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._dispatcher import state as ds

LOCK_FREE = {"lock_key": 10005, "lock_held": False, "holders": [], "reason": "no session holds it"}
LOCK_HELD = dict(LOCK_FREE, lock_held=True)

SYSTEMD = {"changed": False, "stat": {"exists": True}}
NO_SYSTEMD = {"changed": False, "stat": {"exists": False}}
UNREACHABLE = {"unreachable": True, "msg": "ssh: connect to host d1 port 22: No route to host"}
SKIPPED = {"skipped": True, "changed": False}


def command(rc, stdout="", stderr=""):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "changed": False}


PROCESS = command(0, "4242\n")
NO_PROCESS = command(1)
PGREP_MISSING = {"rc": 2, "msg": "[Errno 2] No such file or directory: b'pgrep'", "stdout": "", "stderr": ""}
ACTIVE = command(0, "active\n")
INACTIVE = command(3, "inactive\n")
FAILED = command(3, "failed\n")
NO_BUS = command(1, "", "Failed to connect to bus: No such file or directory")


def host(systemd=None, unit=None, process=None):
    return {
        "systemd": SYSTEMD if systemd is None else systemd,
        "unit": INACTIVE if unit is None else unit,
        "process": NO_PROCESS if process is None else process,
    }


def decide(lock, **hosts):
    return ds.container_dispatcher(lock, list(hosts.items()))


# -- one host: the lock x the unit x the process --------------------------------------

UNIT_STATES = {
    "active": (ACTIVE, True),
    "activating": (command(3, "activating\n"), True),
    "deactivating": (command(3, "deactivating\n"), True),
    "inactive": (INACTIVE, False),
    "failed": (FAILED, False),
    "no bus": (NO_BUS, None),
}
PROCESSES = {"found": (PROCESS, True), "none": (NO_PROCESS, False), "pgrep missing": (PGREP_MISSING, None)}


@pytest.mark.parametrize(
    ("lock_held", "unit", "process"), list(itertools.product([True, False], UNIT_STATES, PROCESSES))
)
def test_every_combination_on_a_systemd_host(lock_held, unit, process):
    unit_probe, unit_up = UNIT_STATES[unit]
    process_probe, process_up = PROCESSES[process]

    decision = decide(LOCK_HELD if lock_held else LOCK_FREE, d1=host(unit=unit_probe, process=process_probe))

    if lock_held:
        expected = ds.RUNNING
    elif unit_up or process_up:
        expected = ds.RUNNING_WITHOUT_LOCK
    elif unit_up is None or process_up is None:
        expected = ds.UNKNOWN
    else:
        expected = ds.NOT_RUNNING
    assert decision["state"] == expected
    # Started only when nothing says one runs and every host was asked.
    assert (decision["start_on"] == "d1") == (expected == ds.NOT_RUNNING)


@pytest.mark.parametrize(("process", "expected"), [(PROCESS, "running_without_lock"), (NO_PROCESS, "not_running")])
def test_without_systemd_the_process_decides_and_nothing_can_be_started(process, expected):
    decision = decide(LOCK_FREE, d1=host(systemd=NO_SYSTEMD, unit=SKIPPED, process=process))

    assert decision["state"] == expected
    assert decision["start_on"] is None
    if expected == ds.NOT_RUNNING:
        assert (
            decision["fix"] == "start crunch-dispatch-slurm by hand on one arvados_dispatchers host (none runs systemd)"
        )


def test_a_held_lock_is_running_whatever_the_hosts_say():
    decision = decide(LOCK_HELD, d1=host(), d2=host(systemd=UNREACHABLE, unit=UNREACHABLE, process=UNREACHABLE))

    assert decision["state"] == ds.RUNNING
    assert decision["fix"] == ""
    assert decision["reason"].startswith("a session holds the Dispatch advisory lock (10005)")


def test_no_dispatcher_host_in_the_inventory_is_unknown_never_not_running():
    decision = decide(LOCK_FREE)

    assert decision["state"] == ds.UNKNOWN
    assert decision["start_on"] is None
    assert "the inventory has no arvados_dispatchers host to ask" in decision["reason"]
    assert "list that host in arvados_dispatchers" in decision["fix"]


@pytest.mark.parametrize(
    "unasked",
    [
        pytest.param(host(systemd=UNREACHABLE, unit=UNREACHABLE, process=UNREACHABLE), id="unreachable"),
        pytest.param({}, id="not in this run"),
        pytest.param(host(process=PGREP_MISSING), id="no pgrep"),
    ],
)
def test_a_host_that_could_not_be_asked_makes_it_unknown(unasked):
    decision = decide(LOCK_FREE, d1=host(), d2=unasked)

    assert decision["state"] == ds.UNKNOWN
    assert decision["unknown_on"] == ["d2"]
    assert decision["start_on"] is None
    assert "not every arvados_dispatchers host could be asked" in decision["reason"]


def test_a_unit_alive_on_any_host_is_running_without_lock_with_the_fix():
    decision = decide(LOCK_FREE, d1=host(), d2=host(unit=ACTIVE, process=PROCESS), d3=host(systemd=UNREACHABLE))

    assert decision["state"] == ds.RUNNING_WITHOUT_LOCK
    assert decision["up_on"] == ["d2"]
    assert decision["start_on"] is None
    assert decision["fix"] == (
        "restart it (systemctl restart crunch-dispatch-slurm on d2) so that it takes the lock again; "
        "never start a second one"
    )
    assert "d2: unit crunch-dispatch-slurm active; crunch-dispatch-slurm: process 4242" in decision["reason"]


def test_not_running_starts_one_dispatcher_on_the_first_host_with_systemd():
    decision = decide(LOCK_FREE, d1=host(systemd=NO_SYSTEMD, unit=SKIPPED), d2=host(), d3=host())

    assert decision["state"] == ds.NOT_RUNNING
    assert decision["start_on"] == "d2"
    assert decision["fix"] == "start crunch-dispatch-slurm on d2"


def test_a_unit_of_another_name():
    decision = ds.container_dispatcher(LOCK_FREE, [("d1", host(unit=ACTIVE))], unit="arvados-dispatch-lsf")

    assert decision["unit"] == "arvados-dispatch-lsf"
    assert "systemctl restart arvados-dispatch-lsf on d1" in decision["fix"]


@pytest.mark.parametrize("lock", [{}, {"lock_held": "no"}, None])
def test_a_missing_lock_result_is_an_error(lock):
    with pytest.raises(ConfigError, match="no lock_held"):
        ds.container_dispatcher(lock, [])


# -- the summary's line -----------------------------------------------------------------


def test_the_line_says_the_state_and_the_fix():
    without = decide(LOCK_FREE, d1=host(unit=ACTIVE))
    unknown = decide(LOCK_FREE)
    not_running = decide(LOCK_FREE, d1=host())

    assert ds.container_dispatcher_line(decide(LOCK_HELD), [], False).startswith("Dispatcher: running: a session holds")
    line = ds.container_dispatcher_line(without, [], False)
    assert line.startswith("Dispatcher: running_without_lock: no session holds")
    assert line.endswith(
        "Fix: restart it (systemctl restart crunch-dispatch-slurm on d1) so that it takes the lock again; never start a second one."
    )
    assert ds.container_dispatcher_line(unknown, [], False).startswith("Dispatcher: unknown: ")
    assert ds.container_dispatcher_line(not_running, ["d1"], False).endswith(
        "Started crunch-dispatch-slurm on d1 (it recovers the containers through the API)."
    )
    assert "Would start crunch-dispatch-slurm on d1" in ds.container_dispatcher_line(not_running, ["d1"], True)
    assert ds.container_dispatcher_line(not_running, [], False).endswith(
        "Fix: start crunch-dispatch-slurm on d1 (recover_start_dispatcher is false)."
    )


# -- crunch-dispatch.rb -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        pytest.param([], "unknown", id="no host in the inventory"),
        pytest.param([("api", PROCESS)], "running", id="its process runs"),
        pytest.param([("api", NO_PROCESS)], "stopped", id="no process"),
        pytest.param([("api", PGREP_MISSING)], "unknown", id="no pgrep"),
        pytest.param([("api", UNREACHABLE)], "unknown", id="unreachable"),
        pytest.param([("api", None)], "unknown", id="not in this run"),
        pytest.param([("api", NO_PROCESS), ("v1", UNREACHABLE)], "unknown", id="one host not asked"),
        pytest.param([("api", PROCESS), ("v1", UNREACHABLE)], "running", id="one runs, one not asked"),
    ],
)
def test_crunch_v1_dispatcher_from_its_process(probes, expected):
    decision = ds.crunch_v1_dispatcher(probes)

    assert decision["state"] == expected
    assert decision["running_on"] == [name for name, probe in probes if probe is PROCESS]


def test_crunch_v1_dispatcher_explains_itself():
    assert ds.crunch_v1_dispatcher([]) == {
        "state": "unknown",
        "reason": "no crunch_v1_dispatcher host in the inventory to ask whether crunch-dispatch.rb runs",
        "running_on": [],
    }
    assert ds.crunch_v1_dispatcher([("api", PROCESS)])["reason"] == "api: crunch-dispatch.rb: process 4242"
    assert ds.crunch_v1_dispatcher([("api", PGREP_MISSING)])["reason"] == (
        "api: crunch-dispatch.rb: pgrep failed (rc 2): [Errno 2] No such file or directory: b'pgrep'"
    )
    assert ds.crunch_v1_dispatcher([("api", UNREACHABLE)])["reason"] == (
        "api: crunch-dispatch.rb: unreachable: ssh: connect to host d1 port 22: No route to host"
    )


@pytest.mark.parametrize("stated", ["running", "stopped", "unknown"])
def test_the_operator_may_state_it(stated):
    decision = ds.crunch_v1_dispatcher([("api", PROCESS if stated == "stopped" else NO_PROCESS)], stated)

    assert decision == {"state": stated, "reason": "stated by reconcile_crunch_v1_dispatcher", "running_on": []}


@pytest.mark.parametrize("stated", [None, "", "auto"])
def test_auto_asks_the_hosts(stated):
    assert ds.crunch_v1_dispatcher([("api", PROCESS)], stated)["state"] == "running"


def test_a_bad_statement_names_the_value():
    with pytest.raises(ConfigError, match=r"one of auto, running, stopped, unknown \(got 'maybe'\)"):
        ds.crunch_v1_dispatcher([], "maybe")


# -- releases before 2.5.0: no Dispatch lock ------------------------------------------
# 2.4.4 lib/controller/dblock/dblock.go:18 has only TrashSweep; 2.5.0 dblock.go:24 adds
# Dispatch, which 2.5.0 crunch-dispatch-slurm.go:144 takes. A 1.1-2.4 dispatcher never holds it.

NO_LOCK_EXPECTED = dict(LOCK_FREE, lock_expected=False)


@pytest.mark.parametrize(
    ("release", "expected"),
    [(None, None), ((1, 4, 3), False), ((2, 4, 4), False), ((2, 5, 0), True), ((3, 2, 1), True)],
)
def test_the_lock_is_expected_from_2_5_0(release, expected):
    assert ds.lock_expected(release) is expected


@pytest.mark.parametrize(("unit", "process"), [(ACTIVE, NO_PROCESS), (INACTIVE, PROCESS), (ACTIVE, PROCESS)])
def test_before_2_5_a_live_unit_or_process_is_running_not_running_without_lock(unit, process):
    decision = decide(NO_LOCK_EXPECTED, d1=host(unit=unit, process=process))
    assert decision["state"] == ds.RUNNING
    assert decision["lock_expected"] is False
    assert decision["reason"].startswith("before Arvados 2.5 dispatchers take no Dispatch lock")
    assert decision["fix"] == ""
    line = ds.container_dispatcher_line(decision, [], False)
    assert line.startswith("Dispatcher: running: before Arvados 2.5") and "restart" not in line


def test_before_2_5_the_other_states_come_from_the_units_and_processes_alone():
    down = decide(NO_LOCK_EXPECTED, d1=host())
    assert down["state"] == ds.NOT_RUNNING and down["start_on"] == "d1"
    assert "no arvados_dispatchers host runs crunch-dispatch-slurm" in down["reason"]
    unknown = decide(NO_LOCK_EXPECTED, d1=host(systemd=UNREACHABLE, unit=UNREACHABLE, process=UNREACHABLE))
    assert unknown["state"] == ds.UNKNOWN
    assert ds.container_dispatcher(NO_LOCK_EXPECTED, [])["state"] == ds.UNKNOWN


def test_an_unknown_release_keeps_the_lock_expected_and_says_how_to_tell():
    decision = decide(dict(LOCK_FREE, lock_expected=None), d1=host(unit=ACTIVE))
    assert decision["state"] == ds.RUNNING_WITHOUT_LOCK
    assert "arvados_version or recover_arvados_version" in decision["reason"]
