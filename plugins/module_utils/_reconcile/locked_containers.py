# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Why an orphaned ``Locked`` container stays locked, and what would fix it.

Pure Python (3.8+), standard library only; the one query is in ``_reconcile.db``.

The Arvados source this follows (services/api/app/models/container.rb, 2.7.4 and 3.2.1):

* ``check_unlock``: only the token whose UUID is the container's ``locked_by_uuid`` may
  unlock it ("locked by a different token"), admin or not; and when ``lock_count`` has
  reached ``Containers.MaxDispatchAttempts`` the unlock cancels the container instead.
  ``lock`` adds one to ``lock_count`` each time a dispatcher locks it.
* The dispatchers of 2.0 and later lock with the cluster's ``SystemRootToken``, which has
  no ``api_client_authorizations`` row: the API server makes it up, UUID
  ``<ClusterID>-gj3su-000000000000000`` (api_client_authorization.rb
  ``check_system_root_token``, 2.0.0 to 3.2.1), so a lock of that UUID is never "missing".
* A dispatcher looks only at the containers locked by its own token
  (sdk/go/dispatch/dispatch.go: ``locked_by_uuid = d.auth.UUID``; others are "ignoring ...
  locked by ..."); at its start crunch-dispatch-slurm submits each of its own ``Locked``
  containers that has no Slurm job.
* A token that is gone or expired authenticates nobody, so nothing can unlock its
  containers; an admin can still cancel a ``Locked`` container (``Locked -> Cancelled``,
  ``validate_change``), and ``handle_completed`` then retries its requests while their
  ``container_count`` is below ``container_count_max``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

from .._common.arvados_release import Release
from .._common.uuids import TOKEN_INFIX

SYSTEM_ROOT_TOKEN = "system_root_token"
MISSING = "missing"
EXPIRED = "expired"
ANOTHER = "another"

# Containers.MaxDispatchAttempts in lib/config/config.default.yml: 5 from 1.4.3 to 2.6.3,
# 10 from 2.7.0 to 3.2.1.
MAX_DISPATCH_ATTEMPTS_DEFAULTS: Tuple[Tuple[Tuple[int, int, int], int], ...] = (((2, 7, 0), 10), ((1, 4, 0), 5))
MAX_DISPATCH_ATTEMPTS_KEY = "Containers.MaxDispatchAttempts"


class DispatchLimit(NamedTuple):
    """Containers.MaxDispatchAttempts, or None when unknown, and where it came from."""

    value: Optional[int]
    source: str

    def describe(self) -> Dict[str, Any]:
        return {"value": self.value, "source": self.source}


UNKNOWN_LIMIT = DispatchLimit(
    None,
    "unknown: no readable config.yml setting it and no arvados_version "
    "(Arvados' default is 5 up to 2.6, 10 from 2.7.0)",
)


class LockToken(NamedTuple):
    """What the database says of one Locked container's lock (_reconcile.db.SQL_LOCK_TOKENS)."""

    container_uuid: str
    lock_count: Optional[int]
    token_found: bool
    token_user_uuid: Optional[str]
    token_expires_at: Optional[str]
    token_expired: bool


def default_limit(release: Release) -> DispatchLimit:
    for since, value in MAX_DISPATCH_ATTEMPTS_DEFAULTS:
        if release >= since:
            return DispatchLimit(value, "Arvados %d.%d.%d's default" % release)
    return UNKNOWN_LIMIT


def system_root_token_uuid(prefix: str) -> str:
    return "%s-%s-000000000000000" % (prefix, TOKEN_INFIX)


def token_state(locked_by_uuid: Optional[str], token: Optional[LockToken], prefix: str) -> str:
    if locked_by_uuid == system_root_token_uuid(prefix):
        return SYSTEM_ROOT_TOKEN
    if not locked_by_uuid or token is None or not token.token_found:
        return MISSING
    return EXPIRED if token.token_expired else ANOTHER


def _attempts_left(lock_count: Optional[int], limit: DispatchLimit) -> Optional[int]:
    if lock_count is None or limit.value is None:
        return None
    return max(0, limit.value - lock_count)


def _cancel_through_api(uuid: str) -> str:
    return (
        "an admin cancels it through the API (PATCH /arvados/v1/containers/%s with state Cancelled); "
        "its container requests then get a new container while container_count < container_count_max" % uuid
    )


def action(uuid: str, state: str, lock_count: Optional[int], limit: DispatchLimit, owner: Optional[str]) -> str:
    left = _attempts_left(lock_count, limit)
    if state == SYSTEM_ROOT_TOKEN:
        fix = (
            "start the container dispatcher (it locks with the SystemRootToken): at its start it submits "
            "each Locked container of its own that has no Slurm job"
        )
        if left == 0 and lock_count is not None and limit.value is not None:
            return fix + (
                "; do not unlock it: lock_count %d has reached MaxDispatchAttempts %d, so an unlock "
                "cancels it (container.rb check_unlock)" % (lock_count, limit.value)
            )
        if left is None:
            return fix + "; an unlock with the SystemRootToken may cancel it (MaxDispatchAttempts unknown)"
        return (
            fix
            + "; or unlock it with the SystemRootToken (POST /arvados/v1/containers/%s/unlock): %d dispatch "
            % (
                uuid,
                left,
            )
            + ("attempt left" if left == 1 else "attempts left")
        )
    if state == ANOTHER:
        return (
            "only the token that locked it can unlock it (container.rb check_unlock), and the cluster's "
            "dispatcher ignores it: let the holder of that token (its user %s) unlock it, or %s"
            % (owner or "unknown", _cancel_through_api(uuid))
        )
    return "the token that locked it is %s, so nothing can unlock it and no dispatcher takes it: %s" % (
        "gone" if state == MISSING else "expired",
        _cancel_through_api(uuid),
    )


def diagnose(
    entries: Sequence[Dict[str, Any]], tokens: Mapping[str, LockToken], prefix: str, limit: DispatchLimit
) -> None:
    """Adds `lock` to each Locked entry of orphaned_containers (in place): the token's state,
    lock_count against the limit, and the fix."""
    for entry in entries:
        if entry["state"] != "Locked":
            continue
        token = tokens.get(entry["uuid"])
        state = token_state(entry.get("locked_by_uuid"), token, prefix)
        lock_count = token.lock_count if token else None
        owner = token.token_user_uuid if token else None
        entry["lock"] = {
            "token": state,
            "token_user_uuid": owner,
            "token_expires_at": token.token_expires_at if token else None,
            "lock_count": lock_count,
            "max_dispatch_attempts": limit.value,
            "dispatch_attempts_left": _attempts_left(lock_count, limit),
            "action": action(entry["uuid"], state, lock_count, limit, owner),
        }


def locks_line(orphaned_containers: Sequence[Mapping[str, Any]], limit: Optional[Mapping[str, Any]]) -> str:
    """The recovery summary's line: each orphaned Locked container's lock and its fix."""
    locked = [entry for entry in orphaned_containers if entry.get("lock")]
    if not locked:
        return "No orphaned Locked container"
    where = (limit or {}).get("source") or UNKNOWN_LIMIT.source
    parts = [
        "%s: token %s, lock_count %s of %s: %s"
        % (
            entry["uuid"],
            entry["lock"]["token"],
            entry["lock"]["lock_count"],
            "?" if entry["lock"]["max_dispatch_attempts"] is None else entry["lock"]["max_dispatch_attempts"],
            entry["lock"]["action"],
        )
        for entry in locked[:20]
    ]
    more = " (and %d more)" % (len(locked) - 20) if len(locked) > 20 else ""
    return "%d orphaned Locked containers (MaxDispatchAttempts from %s): %s%s" % (
        len(locked),
        where,
        "; ".join(parts),
        more,
    )
