# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The largest value each numeric option may take, and the one check of it.

Each option table (fail_jobs_run, reconcile_run, slurm_cancel_run, arvados_db_config)
gives every number option a ``max``: what the value's consumer accepts, so that a value
past it is refused by name before anything is read or changed, instead of crashing
(``OverflowError`` in a sleep), hanging or being refused by PostgreSQL half way through
a run. The module documentation states the same bounds; a unit test holds them together.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .errors import ConfigError, shown

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

NUMBER_TYPES = ("int", "float")


def check_max(name: str, value: Any, spec: Mapping[str, Any]) -> None:
    """A ConfigError naming option `name` when `value` is a number above its table's ``max``.

    Values that are not numbers, and nan, are left to the option's own checks, which say
    what the option must be.
    """
    maximum = spec.get("max")
    if maximum is None or isinstance(value, bool):
        return
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return
    if math.isnan(number) or number <= maximum:
        return
    raise ConfigError("option %s must be at most %s, got %s" % (name, number_text(maximum), shown(value)))


def number_text(number: Any) -> str:
    """3600.0 as 3600, 0.5 as 0.5: how the documentation writes a bound."""
    return "%d" % number if float(number).is_integer() else repr(float(number))


def check_maxima(params: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]]) -> None:
    """check_max for each option of `params` that the table `options` bounds."""
    for name, value in params.items():
        if name in options and value is not None:
            check_max(name, value, options[name])


def check_text(name: str, value: Any, secret: bool = False) -> None:
    """A ConfigError naming option `name` when the text `value` (or an element of a list)
    holds what PostgreSQL and libpq cannot take: a NUL character, which no text column can
    store, or a lone surrogate, which is no character UTF-8 can encode. Found at a write,
    either would fail a batch after its Slurm jobs were cancelled. A `secret` value is
    never shown."""
    for text in value if isinstance(value, (list, tuple)) else [value]:
        if not isinstance(text, str):
            continue
        if "\x00" in text:
            problem = "a NUL character (\\x00), which PostgreSQL text cannot hold"
        elif _has_lone_surrogate(text):
            problem = "a lone surrogate, which is no character UTF-8 can encode"
        else:
            continue
        raise ConfigError(
            "option %s must not contain %s%s" % (name, problem, "" if secret else ", got %s" % excerpt(text))
        )


def check_texts(params: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]]) -> None:
    """check_text for each option of `params` the table `options` knows."""
    for name, value in params.items():
        if name in options and value is not None:
            check_text(name, value, secret=bool(options[name].get("no_log")))


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# How much of a long value a message shows.
EXCERPT_CHARACTERS = 60


def excerpt(text: str) -> str:
    """`text` quoted and escaped for a message (errors.shown), cut after
    EXCERPT_CHARACTERS with the length said."""
    if len(text) <= EXCERPT_CHARACTERS:
        return "'%s'" % shown(text)
    return "'%s...' (%d characters)" % (shown(text[:EXCERPT_CHARACTERS]), len(text))


def unbounded_numbers(options: Mapping[str, Mapping[str, Any]]) -> list:
    """The number options of a table without a ``max``: none, as a test checks."""
    return sorted(name for name, spec in options.items() if spec["type"] in NUMBER_TYPES and "max" not in spec)
