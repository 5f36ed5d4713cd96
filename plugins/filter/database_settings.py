# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the recovery playbooks over their database settings (recover_db,
_reconcile.db), read with the option table the database modules use
(module_utils/_database/settings.py), so that a play can refuse bad settings before an
earlier play has changed anything, with the message a module would give; and the
settings of a cluster installed by Arvados' Ansible installer, read from its
``arvados_config_file`` on the controller as the modules read a config.yml."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import parse
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.settings import (
    CONNECTION_MUTUALLY_EXCLUSIVE,
    CONNECTION_OPTIONS,
    cluster_setting,
    resolve_database_settings,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.locked_containers import (
    MAX_DISPATCH_ATTEMPTS_KEY,
)

_NAME_OF = {alias: name for name, option in CONNECTION_OPTIONS.items() for alias in option.get("aliases") or ()}


def _by_name(settings: Mapping) -> dict:
    """The settings under the options' names; an alias given with its name is an error,
    as the modules make it."""
    named: dict = {}
    for key, value in settings.items():
        name = _NAME_OF.get(key, key)
        if name in named:
            raise ConfigError("%s given twice (as %s and one of its aliases)" % (name, name))
        named[name] = value
    return named


def _exclusive(named: Mapping) -> None:
    for group in CONNECTION_MUTUALLY_EXCLUSIVE:
        given = [name for name in group if named.get(name) is not None]
        if len(given) > 1:
            raise ConfigError("%s: only one may be given" % ", ".join(given))


def database_settings_error(settings, variable="recover_db"):
    """'' when `settings` are database options the modules accept, else what is wrong,
    naming `variable` and the bad option, never a password's value."""
    if not isinstance(settings, Mapping):
        return "%s must be a dict of database options, not %s" % (variable, type(settings).__name__)
    try:
        named = _by_name(settings)
        _exclusive(named)
        parse(CONNECTION_OPTIONS, named, from_text=True)
    except ConfigError as error:
        return "%s: %s (ansible-doc arvados_ops.recovery.arvados_fail_jobs lists the database options)" % (
            variable,
            error,
        )
    return ""


def names_a_password(settings):
    """Whether a key of `settings` names a password: a misspelt one (db_passwd) is refused
    by the module, which then shows its arguments at -vvv, so such a task must hide its
    output."""
    return isinstance(settings, Mapping) and any("pass" in str(key) for key in settings)


# The module options each libpq setting of a config.yml's PostgreSQL.Connection is given as.
_OPTION_OF = {
    "host": "db_host",
    "port": "db_port",
    "user": "db_user",
    "password": "db_password",
    "dbname": "db_name",
    "sslmode": "db_sslmode",
    "sslrootcert": "db_ca_cert",
}


def cluster_settings(config_file, cluster_id=""):
    """What the playbooks take from the installer's ``arvados_config_file`` (a path on the
    controller, read there with the checks and the text scalars of the modules' own
    config.yml reader) for ``arvados_cluster_id`` (the only cluster when empty):

    - ``db``: ``Clusters.<id>.PostgreSQL.Connection`` as the database modules' options,
      with ``config_file: ''`` so that the host's own copy of the file (root-only where the
      installer wrote it) is not read as well;
    - ``cluster_id``, ``max_dispatch_attempts`` (``{value, source}``, value None when the
      file does not set ``Containers.MaxDispatchAttempts``) and ``source``;
    - ``error``: '' or what is wrong, naming the file and the key, never the password.
      Returned rather than raised, because the task that calls this hides its output."""
    path = str(config_file or "")
    wanted = str(cluster_id or "") or None
    try:
        if not path:
            raise ConfigError("arvados_config_file is empty")
        settings = resolve_database_settings({"config_file": path, "cluster_id": wanted})
        chosen = wanted or settings.source.rsplit(", cluster ", 1)[-1]
        limit = cluster_setting(
            {"config_file": path, "cluster_id": chosen}, tuple(MAX_DISPATCH_ATTEMPTS_KEY.split("."))
        )
    except ConfigError as error:
        return {"error": "arvados_config_file: %s" % error}
    if limit is not None and not limit[0].strip().isdigit():
        return {"error": "arvados_config_file: %s is %r, not a whole number" % (limit[1], limit[0])}
    found = settings.as_psycopg_kwargs()
    db = {"config_file": ""}
    db.update({option: found[key] for key, option in _OPTION_OF.items() if found.get(key) is not None})
    return {
        "error": "",
        "db": db,
        "cluster_id": chosen,
        "max_dispatch_attempts": {
            "value": int(limit[0]) if limit else None,
            "source": limit[1] if limit else None,
        },
        "source": settings.source,
    }


class FilterModule:
    def filters(self):
        return {
            "cluster_settings": cluster_settings,
            "database_settings_error": database_settings_error,
            "names_a_password": names_a_password,
        }
