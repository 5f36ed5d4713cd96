# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the recovery playbooks over their database settings (recover_db,
reconcile_db), read with the option table the database modules use
(module_utils/arvados_db_config.py), so that a play can refuse bad settings before an
earlier play has changed anything, with the message a module would give."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.arvados_ops.recovery.plugins.module_utils.arvados_db_config import (
    CONNECTION_MUTUALLY_EXCLUSIVE,
    CONNECTION_OPTIONS,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils.options import parse

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


class FilterModule:
    def filters(self):
        return {
            "database_settings_error": database_settings_error,
            "names_a_password": names_a_password,
        }
