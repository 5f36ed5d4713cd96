# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the database modules share around their engines, without importing Ansible.

- `argument_spec(options)`: an Ansible argument_spec made from an engine's option table,
  the table the `arvados-fail-jobs` flags are made from too;
- `run_engine(module, engine, options, describe_missing)`: one way to run an engine and
  report: psycopg missing (for the database modules), its result, its warnings, or its
  one-line reason as the failure.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Dict, Mapping, Optional

from .errors import RecoveryError

# What an option table holds for people (flags' help), not for Ansible.
_NOT_FOR_ANSIBLE = ("help",)


def argument_spec(options: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The table without help texts and without the defaults that are None."""
    return {
        name: {
            key: value
            for key, value in spec.items()
            if key not in _NOT_FOR_ANSIBLE and not (key == "default" and value is None)
        }
        for name, spec in options.items()
    }


def canonical_params(params: Mapping[str, Any], options: Mapping[str, Any]) -> Dict[str, Any]:
    """The options by their own names: Ansible also keeps each value under the alias it was given."""
    return {name: params[name] for name in options if name in params}


def psycopg_import_error() -> Optional[str]:
    """The traceback of importing psycopg 3, or None when it is there."""
    try:
        import psycopg  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return traceback.format_exc()
    return None


def run_engine(
    module: Any,
    engine: Callable[[Dict[str, Any]], Dict[str, Any]],
    options: Mapping[str, Any],
    describe_missing: Optional[Callable[[str], str]] = None,
) -> None:
    """Run `engine` on the module's options; exit_json with its result or fail_json with its reason.

    `describe_missing` is Ansible's missing_required_lib, given by the modules whose engine
    needs psycopg: it tells what to install when psycopg is not. A result with `failed` set
    (work the engine could not finish, with what it did) is reported with fail_json.
    """
    if describe_missing is not None:
        import_error = psycopg_import_error()
        if import_error:
            module.fail_json(msg=describe_missing("psycopg (version 3)"), exception=import_error)
    try:
        result = engine(canonical_params(module.params, options))
    except RecoveryError as error:
        module.fail_json(msg=str(error))
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)
