# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The watch's findings as events for ansible-rulebook (the logic: plugins/module_utils/_reconcile/findings.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
short_description: Events from the read-only reconciliation of Arvados' database with Slurm.
description:
  - Every O(interval) seconds, runs the read the module C(arvados_ops.recovery.arvados_reconcile_info)
    and the command C(arvados-recovery-watch) run (Slurm's queue and nodes against the Arvados
    database, nothing written), and puts one event on the queue per finding that two consecutive
    reads both made, naming only what both named.
  - "Findings: C(orphaned_jobs), C(orphaned_containers), C(stray_slurm_jobs), C(nodes_down_after_reboot),
    C(dispatcher_without_lock), C(dispatcher_not_running) (with O(dispatcher_unit)), C(jobs_retry_overdue),
    C(read_failed)."
  - A finding is told once; again when what it names changes, after O(repeat_after) seconds while it
    lasts, and after it has cleared and come back.
  - "Each event is C({arvados_recovery: {finding, names, count, details, read_at, first_read_at, read_ok,
    cluster_prefix, database_is_standby, dispatcher}}): C(names) the UUIDs, Slurm job ids or node names,
    sorted (C([dispatcher]) for the dispatcher's findings, C([read]) for a failed read), C(details) per
    name what the read said of it (a failed read's C(message)), C(first_read_at) and C(read_at) the two
    reads that both made it (UTC), C(dispatcher.known) false when the read could not tell whether a
    dispatcher runs. A failed read's event has C(read_ok) false and no cluster facts."
  - Every option of C(arvados_ops.recovery.arvados_reconcile_info) is an option here too, with the same
    meaning, default and checks (the database settings, C(kinds), C(orphans), C(crunch_v1_dispatcher),
    C(arvados_version), ...); see that module's documentation. A bad value stops the source before its
    first read, with the option's name in the message.
  - The source never writes to the database or Slurm. Its credentials are never put in an event.
options:
  interval:
    description: Seconds from the start of one read to the start of the next (5 to 86400).
    type: float
    default: 60.0
  repeat_after:
    description: Seconds after which a finding that lasts is told again; 0 never (at most 86400).
    type: float
    default: 900.0
  dispatcher_unit:
    description:
      - The dispatcher's systemd unit on the host that runs the source, asked with C(systemctl is-active);
        C(dispatcher_not_running) when it is not active. Empty, not asked.
    type: str
    default: ""
  systemctl_timeout:
    description: Seconds C(systemctl is-active) may take; past them the unit's state is unknown (at most 60).
    type: float
    default: 10.0
  options_file:
    description:
      - A YAML or JSON mapping of these options (any option above or of C(arvados_reconcile_info)), read and
        checked as C(arvados-recovery-watch --options-file) reads its own (a password only in a file that only
        its owner can read). The rulebook's arguments win over it.
      - A rulebook's source arguments must be written out as a mapping; this file holds the rest.
    type: path
"""

EXAMPLES = r"""
- name: Heal a cluster after its nodes reboot
  hosts: all
  sources:
    - arvados_ops.recovery.findings:
        interval: 60
        config_file: /etc/arvados/config.yml
        crunch_v1_dispatcher: stopped
        arvados_version: 3.2.1
  rules:
    - name: Tell the operator
      condition: event.arvados_recovery.finding == "orphaned_containers"
      action:
        debug:
          msg: "{{ event.arvados_recovery.count }} orphaned containers"
"""

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

LOGGER = logging.getLogger("arvados_ops.recovery.findings")


class Engine(NamedTuple):
    findings: Any
    # The watch's own selection of the read's options: one rule for both readers.
    reconcile_params: Callable[[dict[str, Any]], dict[str, Any]]
    run_reconcile: Callable[..., dict[str, Any]]
    unit_active: Callable[[str, float], bool | None]
    known_error: type


def _import_engine() -> Engine:
    """The collection's engine, from the collection this file is installed in:
    ansible-rulebook runs a source as a file (runpy), not as a module of its collection."""
    # .../recovery/extensions/eda/plugins/event_source/findings.py: five levels up.
    collection = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
    namespaces = os.path.dirname(os.path.dirname(collection))
    if os.path.basename(namespaces) != "ansible_collections":
        raise ImportError(
            "arvados_ops.recovery.findings must run from an installed collection "
            "(.../ansible_collections/arvados_ops/recovery), not from %s" % collection
        )
    if os.path.dirname(namespaces) not in sys.path:
        sys.path.append(os.path.dirname(namespaces))
    # pylint: disable=import-outside-toplevel
    from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import errors
    from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import findings, run, watch_cli

    return Engine(
        findings, watch_cli.reconcile_params, run.run_reconcile, watch_cli.systemd_unit_active, errors.RecoveryError
    )


def read_once(params: dict[str, Any], engine) -> tuple[dict[str, Any] | None, bool | None, str | None]:
    """(result, dispatcher unit active, None) after a successful read; (None, None, why) after a
    failed one. Runs in a thread: the read blocks on the database and on squeue."""
    try:
        result = engine.run_reconcile(engine.reconcile_params(params))
    except Exception as error:  # pylint: disable=broad-except
        # Whatever stopped the read, a bug included, is a failed read to tell, not the end
        # of the source: the rulebook's guardrails hold every remedy while reads fail.
        if not isinstance(error, engine.known_error):
            LOGGER.exception("the read failed unexpectedly")
        return None, None, str(error) or error.__class__.__name__
    active = engine.unit_active(params["dispatcher_unit"], params["systemctl_timeout"])
    return result, active, None


async def main(
    queue: asyncio.Queue,
    args: dict[str, Any],
    engine=None,
    reads: int | None = None,
    read: Callable[..., Any] = read_once,
) -> None:
    """`reads` bounds the loop for tests; ansible-rulebook runs it until shutdown."""
    engine = engine or _import_engine()
    findings = engine.findings
    # ansible-rulebook's own arguments (eda_feedback_queue, ...) are not the source's options.
    params = findings.check_source_options({name: value for name, value in args.items() if not name.startswith("eda_")})
    confirmer = findings.Confirmer(params["repeat_after"], time.time)
    done = 0
    while reads is None or done < reads:
        began = time.monotonic()
        result, active, failure = await asyncio.to_thread(read, params, engine)
        context = findings.read_context(result, active)
        if failure is None:
            events: list[dict[str, Any]] = confirmer.read(findings.findings_of(result, active), context)
        else:
            LOGGER.warning("read failed: %s", failure)
            events = confirmer.failed(failure, context)
        for event in events:
            await queue.put(event)
        done += 1
        if reads is None or done < reads:
            await asyncio.sleep(max(0.0, params["interval"] - (time.monotonic() - began)))


if __name__ == "__main__":

    class PrintingQueue(asyncio.Queue):
        async def put(self, item):
            print(item)  # noqa: T201

    asyncio.run(main(PrintingQueue(), {}))
