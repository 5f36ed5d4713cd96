# -*- coding: utf-8 -*-
# Copyright (c) arvados_ops.recovery contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Arvados object UUIDs: ``<cluster prefix>-<type infix>-<15 chars [0-9a-z]>``.

Pure Python (3.8+), no Ansible import: the modules, the boot-time command and
the lab's data generator share this one definition.
"""

from __future__ import annotations

import re
from typing import List, Optional, Protocol

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
RANDOM_PART_LENGTH = 15

JOB_INFIX = "8i9sb"
JOB_TASK_INFIX = "ot0gb"
LOG_INFIX = "57u5n"
TOKEN_INFIX = "gj3su"
CONTAINER_INFIX = "dz642"
CONTAINER_REQUEST_INFIX = "xvhdp"
USER_INFIX = "tpzed"
GROUP_INFIX = "j7d0g"

INFIXES = {
    "job": JOB_INFIX,
    "job_task": JOB_TASK_INFIX,
    "log": LOG_INFIX,
    "token": TOKEN_INFIX,
    "container": CONTAINER_INFIX,
    "container_request": CONTAINER_REQUEST_INFIX,
    "user": USER_INFIX,
    "group": GROUP_INFIX,
}

# Python's "$" also matches before a trailing newline, so the compiled
# patterns end in "\Z"; uuid_pattern's "$" spelling is for documentation and
# for tools (squeue filters, option defaults) that want the usual text.
_PREFIX_RE = re.compile(r"^[0-9a-z]{5}\Z")
ANY_UUID_RE = re.compile(r"^[0-9a-z]{5}-[0-9a-z]{5}-[0-9a-z]{15}\Z")


def check_infix(infix: object) -> str:
    """Return ``infix`` or raise ValueError: infixes look like prefixes."""
    if not (isinstance(infix, str) and _PREFIX_RE.match(infix)):
        raise ValueError("invalid Arvados type infix %r: expected 5 characters of [0-9a-z]" % (infix,))
    return infix


def uuid_pattern(infix: str) -> str:
    """The documented pattern text for one kind, e.g. ``^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$``."""
    return r"^[0-9a-z]{5}-%s-[0-9a-z]{15}$" % check_infix(infix)


def _pattern_for(infix: str) -> re.Pattern[str]:
    return re.compile(uuid_pattern(infix)[:-1] + r"\Z")


JOB_UUID_RE = _pattern_for(JOB_INFIX)
LOG_UUID_RE = _pattern_for(LOG_INFIX)
CONTAINER_UUID_RE = _pattern_for(CONTAINER_INFIX)

PATTERNS = {kind: _pattern_for(infix) for kind, infix in INFIXES.items()}


def is_valid_prefix(prefix: object) -> bool:
    """True for a cluster prefix: exactly 5 characters of [0-9a-z]."""
    return isinstance(prefix, str) and bool(_PREFIX_RE.match(prefix))


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` or raise ValueError naming what a prefix must be."""
    if not is_valid_prefix(prefix):
        raise ValueError(
            "invalid Arvados cluster prefix %r: expected exactly 5 characters of [0-9a-z], such as 'zzzzz'" % (prefix,)
        )
    return prefix  # type: ignore[return-value]


_RANDOM_PART_RANGE = 36**RANDOM_PART_LENGTH
_TRIPLE_RANGE = 36**3
_triples: List[str] = []


def _base36_15(number: int) -> str:
    # Three digits per table lookup: the data generator makes millions.
    if not _triples:
        _triples.extend(a + b + c for a in ALPHABET for b in ALPHABET for c in ALPHABET)
    parts = []
    for _group in range(RANDOM_PART_LENGTH // 3):
        number, digits = divmod(number, _TRIPLE_RANGE)
        parts.append(_triples[digits])
    return "".join(parts)


class RandomSource(Protocol):
    """What ``random_part`` draws from: ``random.Random(seed)`` and the like."""

    def randrange(self, stop: int, /) -> int:
        """A whole number from 0 up to ``stop``, ``stop`` excluded."""


def random_part(rng: Optional[RandomSource] = None) -> str:
    """15 base-36 characters, uniformly; from ``secrets`` unless ``rng`` is given.

    ``rng`` is anything with ``randrange(n)`` such as ``random.Random(seed)``:
    generated data becomes reproducible.
    """
    if rng is None:
        # Imported here: secrets loads hashlib, hmac and OpenSSL's libcrypto, a few ms of
        # every command's start-up, and a run that writes no row draws nothing (issue 40, P3).
        import secrets  # pylint: disable=import-outside-toplevel

        return _base36_15(secrets.randbelow(_RANDOM_PART_RANGE))
    return _base36_15(rng.randrange(_RANDOM_PART_RANGE))


def new_uuid(prefix: str, infix: str, rng: Optional[RandomSource] = None) -> str:
    """A new UUID ``<prefix>-<infix>-<15 random chars>``."""
    return "%s-%s-%s" % (check_prefix(prefix), check_infix(infix), random_part(rng))


def system_user_uuid(prefix: str) -> str:
    """The cluster's system (root) user, ``<prefix>-tpzed-000000000000000``."""
    return "%s-%s-%s" % (check_prefix(prefix), USER_INFIX, "0" * RANDOM_PART_LENGTH)


def is_uuid_of(kind: str, value: object) -> bool:
    """True when ``value`` fully matches the UUID pattern of ``kind``."""
    return isinstance(value, str) and bool(PATTERNS[kind].match(value))


def cluster_of(uuid: str) -> str:
    """The cluster prefix of a UUID (raises ValueError for a non-UUID)."""
    if not (isinstance(uuid, str) and ANY_UUID_RE.match(uuid)):
        raise ValueError("not an Arvados UUID: %r" % (uuid,))
    return uuid[:5]
