# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the reconciliation's tests share: a cluster's UUIDs, squeue's lines and the records
the database holds (test_engine.py, test_db.py, test_run.py import them from here)."""

from __future__ import annotations

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.engine import Record, listing_of
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import JOB_NODES_LISTING, read_listing

P = "zzzzz"
JOB_A = P + "-8i9sb-aaaaaaaaaaaaaaa"
JOB_B = P + "-8i9sb-bbbbbbbbbbbbbbb"
JOB_C = P + "-8i9sb-ccccccccccccccc"
CTR_A = P + "-dz642-aaaaaaaaaaaaaaa"
CTR_B = P + "-dz642-bbbbbbbbbbbbbbb"
OTHER = "yyyyy-dz642-aaaaaaaaaaaaaaa"
STARTED = "2026-11-30T10:00:00"
LOCK = P + "-gj3su-000000000000000"


def line(job_id, name, state="RUNNING", user="crunch", nodes="compute1"):
    return "|".join((job_id, state, user, nodes, name))


def parse_listing(stdout, prefix, kinds):
    """A listing as SlurmLister reads squeue's output."""
    return listing_of(read_listing(stdout, JOB_NODES_LISTING), prefix, kinds)


def job(uuid, state="Running", recent=False, age=600.0):
    return Record(uuid, state, STARTED if state == "Running" else None, P + "-tpzed-u", None, recent=recent, age=age)


def container(uuid, state="Running", priority=1, recent=False, age=600.0):
    return Record(
        uuid, state, STARTED, LOCK if state in ("Locked", "Running") else None, priority, recent=recent, age=age
    )
