# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the modules share around their engines; Ansible is imported only once a module
runs (task_arguments).

- `run_engine(module, engine, options, describe_missing)`: one way to run an engine and
  report: psycopg 3 and psycopg2 both missing (for the database modules), its result, its warnings, or its
  one-line reason as the failure, with the values of the no_log options masked in it
  (`without_secrets`), so that a failure says why without the secret.
- the numbers as the task gave them (`task_arguments`) checked by the option layer before
  the engine runs: AnsibleModule's int and float take '\u0665' and '1_000'.
- `run_slurm_module(module, engine, options)`: the same for the Slurm modules, whose
  engines also take the task's check mode and diff.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set

from .._common.errors import RecoveryError, shown
from .._common.options import check_given_numbers
from .._database.driver import INSTALL_HINT, LIBRARY, driver_import_error

# What a secret is replaced with in a message (as Ansible masks no_log values).
MASK = "********"


def canonical_params(params: Mapping[str, Any], options: Mapping[str, Any]) -> Dict[str, Any]:
    """The options by their own names: Ansible also keeps each value under the alias it was given."""
    return {name: params[name] for name in options if name in params}


def secret_values(params: Mapping[str, Any], options: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """The values of the no_log options given, longest first (so that a secret holding
    another is masked whole)."""
    values: Set[str] = set()
    for name, spec in options.items():
        value = params.get(name)
        if spec.get("no_log") and isinstance(value, str) and value:
            values.add(value)
    return sorted(values, key=len, reverse=True)


def without_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret masked and every control character escaped: a failure's
    message then says why (a wrong password, say) without the secret, and the task need
    not hide its whole result with no_log."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return shown(text)


def task_arguments() -> Mapping[str, Any]:
    """The task's arguments as the controller sent them, before AnsibleModule typed them:
    Ansible's _load_params, which its docstring offers to modules that process their own
    parameters, reading again what AnsibleModule read. Empty when no AnsibleModule read
    any (a caller without Ansible, a test's stand-in module): nothing was converted then."""
    try:
        from ansible.module_utils import basic  # pylint: disable=import-outside-toplevel
    except ImportError:
        return {}
    if getattr(basic, "_ANSIBLE_ARGS", None) is None:
        return {}
    return basic._load_params()


def psycopg_import_error() -> Optional[str]:
    """The traceback of importing psycopg 3 and psycopg2 (or the one
    ARVADOS_RECOVERY_PG_DRIVER names), or None when one is there."""
    return driver_import_error()


def run_engine(
    module: Any,
    engine: Callable[[Dict[str, Any]], Dict[str, Any]],
    options: Mapping[str, Any],
    describe_missing: Optional[Callable[[str], str]] = None,
) -> None:
    """Run `engine` on the module's options; exit_json with its result or fail_json with its reason.

    `describe_missing` is Ansible's missing_required_lib, given by the modules whose engine
    needs psycopg 3 or psycopg2: it tells what to install when neither is there. A result with `failed` set
    (work the engine could not finish, with what it did) is reported with fail_json.
    """
    secrets = secret_values(module.params, options)
    try:
        # The task's own values first: a bad one is named whatever the host lacks.
        check_given_numbers(options, task_arguments())
    except RecoveryError as error:
        module.fail_json(msg=without_secrets(str(error), secrets))
    if describe_missing is not None:
        import_error = psycopg_import_error()
        if import_error:
            module.fail_json(msg="%s; %s" % (describe_missing(LIBRARY), INSTALL_HINT), exception=import_error)
    try:
        result = engine(canonical_params(module.params, options))
    except RecoveryError as error:
        module.fail_json(msg=without_secrets(str(error), secrets))
    for warning in result.pop("warnings", []):
        module.warn(without_secrets(warning, secrets))
    if result.pop("failed", False):
        if "msg" in result:
            result["msg"] = without_secrets(str(result["msg"]), secrets)
        module.fail_json(**result)
    module.exit_json(**result)


def run_slurm_module(module: Any, engine: Callable[..., Dict[str, Any]], options: Mapping[str, Any]) -> None:
    """Run a Slurm module's `engine` (called with its options, check_mode and diff) as
    run_engine does. The engine finds Slurm's programs itself, as every module and command
    of the collection does (_slurm/runner.py require_program: PATH, then the sbin
    directories, as get_bin_path searches), and a missing one fails the task naming it."""
    run_engine(
        module,
        lambda params: engine(
            params,
            check_mode=module.check_mode,
            # AnsibleModule has no public name for the task's diff mode.
            diff=module._diff,
        ),
        options,
    )
