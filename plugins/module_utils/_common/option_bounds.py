# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The largest value each numeric option may take.

Each option table (_cleanup.run, _reconcile.run, _cancel.request, _database.settings)
gives every number option a Range (options.py) up to one of these: what the value's
consumer accepts, so that a value past it is refused by name before anything is read or
changed, instead of crashing (``OverflowError`` in a sleep), hanging or being refused by
PostgreSQL half way through a run. The module documentation states the same bounds; a
unit test holds them together.
"""

from __future__ import annotations

# A wait or pause: time.sleep and the deadlines built on it. A day is past any sensible
# wait of a cleanup, and far inside what the platform's sleep takes.
MAX_SLEEP_SECONDS = 86400
# PostgreSQL's lock_timeout and statement_timeout are int milliseconds: 2^31 - 1 ms.
MAX_PG_TIMEOUT_SECONDS = 2147483
# Rows per statement (FETCH count, uuid = ANY list): memory on both ends grows with it.
MAX_BATCH_SIZE = 100000
# scancel calls a second, and scancel processes at once: past these, slurmctld is flooded.
MAX_SCANCEL_PER_SECOND = 1000
MAX_CONCURRENT_SCANCEL = 64
# Job ids on one scancel command line: far below the kernel's argument limit.
MAX_JOB_IDS_PER_SCANCEL = 10000
MAX_PORT = 65535
