# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The options file of the collection's commands (``arvados-fail-jobs``,
``arvados-recovery-watch``): a YAML or JSON mapping of option names to values; and the
commands' flags for the same options (:func:`add_option_flag`).

The file is read as options only: a file that is not a mapping of the command's options is
refused by its type or by the count of its unknown keys, never quoted (behind a sudo rule
a command could otherwise show a file its caller cannot read). A file that holds a secret
(an option with ``no_log``, the database password) must be kept from other users as libpq
wants ``~/.pgpass``: no permission for group or others (``0600``), except that a file
owned by root may be readable by its group (``0640``), as the roles write it for a group
and as PostgreSQL accepts its own key file.

Pure Python (3.8+); PyYAML when installed, else JSON only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import stat
from typing import Any, Dict, Mapping, Optional, Sequence

from .errors import RecoveryError, shown
from .options import Option

# An options file is a few lines; reading more is reading some other file.
MAX_OPTIONS_FILE_BYTES = 65536
# The permissions a file holding a password may have: the owner's (libpq's rule for
# ~/.pgpass); and, for a file root owns, its group's read (PostgreSQL's rule for its key
# file, and what the roles write with their options file group).
_OTHERS_PERMISSIONS = stat.S_IRWXG | stat.S_IRWXO
_ROOT_GROUP_READ = stat.S_IRGRP
_TYPE_WORDS = (
    (dict, "a mapping"),
    (bool, "true or false"),
    (list, "a list"),
    (str, "text"),
    ((int, float), "a number"),
)


def read_options_file(path: str, table: Mapping[str, Mapping[str, Any]], program: str) -> Dict[str, Any]:
    """The options of the file at `path` (names of `table`, the options of `program`), or a
    RecoveryError that names the file and what is wrong with it, never a word of its
    contents. The values are as the file writes them: the caller parses them."""
    shown_path = shown(path)
    text, status = _read_small_text(path, shown_path)
    values = _parse_options(text, shown_path)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise RecoveryError(
            "options file %s holds %s, not a mapping of option names to values" % (shown_path, _type_word(values))
        )
    unknown = [key for key in values if key not in table]
    if unknown:
        raise RecoveryError(unknown_keys_message(shown_path, unknown, table, program))
    secrets = sorted(name for name, value in values.items() if table[name].get("no_log") and value)
    if secrets:
        check_secret_file_mode(shown_path, status, secrets)
    return values


def _read_small_text(path: str, shown_path: str):
    """(the file's text, its os.stat_result), read from one open file."""
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            data = handle.read(MAX_OPTIONS_FILE_BYTES + 1)
    except OSError as error:
        raise RecoveryError("cannot read options file %s: %s" % (shown_path, error.strerror)) from None
    if len(data) > MAX_OPTIONS_FILE_BYTES:
        raise RecoveryError(
            "options file %s is larger than %d bytes: not an options file" % (shown_path, MAX_OPTIONS_FILE_BYTES)
        )
    try:
        return data.decode("utf-8"), status
    except UnicodeDecodeError:
        raise RecoveryError("options file %s is not UTF-8 text" % shown_path) from None


def _parse_options(text: str, shown_path: str) -> Any:
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return _json_options(text, shown_path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        # PyYAML quotes the offending text, which may be the password: say only where.
        raise RecoveryError("options file %s is not valid YAML" % shown_path) from None


def _json_options(text: str, shown_path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise RecoveryError(
            "options file %s is not valid JSON (and PyYAML is not installed to read YAML)" % shown_path
        ) from None


def _type_word(value: Any) -> str:
    for kinds, word in _TYPE_WORDS:
        if isinstance(value, kinds):
            return word
    return "a %s" % type(value).__name__


def unknown_keys_message(shown_path: str, unknown: Sequence[Any], table: Mapping[str, Any], program: str) -> str:
    """How many keys are no option, and the known options close to some of them: the keys
    themselves are not shown, as any text of a file that is no options file (a password,
    a line of /etc/shadow) can be a key."""
    near = sorted(
        set(
            match
            for key in unknown
            if isinstance(key, str)
            for match in difflib.get_close_matches(key, list(table), n=1, cutoff=0.8)
        )
    )
    return "options file %s has %d key(s) that are no option of %s (not shown: it may not be an options file)%s" % (
        shown_path,
        len(unknown),
        program,
        "; options with a close name: %s" % ", ".join(near) if near else "",
    )


def check_secret_file_mode(shown_path: str, status: os.stat_result, secrets: Sequence[str]) -> None:
    """Refuse a file holding a secret that users other than its owner may read or write,
    as libpq refuses ~/.pgpass; a file root owns may be readable by its group."""
    mode = stat.S_IMODE(status.st_mode)
    allowed = _ROOT_GROUP_READ if status.st_uid == 0 else 0
    if mode & _OTHERS_PERMISSIONS & ~allowed:
        raise RecoveryError(
            "options file %s holds %s but is mode %04o (owner uid %d): other users could read or change it; "
            "chmod 0600 (or 0640 with owner root)" % (shown_path, ", ".join(secrets), mode, status.st_uid)
        )


def file_and_flags(args: argparse.Namespace, table: Mapping[str, Option], program: str) -> Dict[str, Any]:
    """A command's options as given: the options file's (``--options-file``), the flags'
    over them; not yet converted nor checked (``parse(..., from_text=True)`` does both)."""
    params = read_options_file(args.options_file, table, program) if args.options_file else {}
    for name in table:
        value = getattr(args, name, None)
        if value is not None:
            params[name] = value
    return params


def add_option_flag(
    parser: argparse.ArgumentParser,
    name: str,
    option: Option,
    aliases: Sequence[str] = (),
    help_text: Optional[str] = None,
    metavar: Optional[str] = None,
) -> None:
    """Option `name` of a command's table as the flag ``--name`` (and `aliases`); a bool
    as ``--name`` and ``--no-name``, which together are an error naming both (argparse's
    "not allowed with"), not "the last wins". Values stay text, as an options file's may
    be: ``parse(..., from_text=True)`` converts and checks both, so that a bad number or
    choice gets the modules' message whether a flag or the file gives it."""
    flags = ["--" + name.replace("_", "-")] + list(aliases)
    help_text = help_text if help_text is not None else option.help
    if option.type == "bool":
        pair = parser.add_mutually_exclusive_group()
        pair.add_argument(*flags, dest=name, action="store_true", default=None, help=help_text)
        pair.add_argument("--no-" + flags[0][2:], dest=name, action="store_false", help="the opposite of %s" % flags[0])
        return
    kwargs: Dict[str, Any] = {"dest": name, "default": None, "help": help_text, "metavar": metavar}
    if option.type == "list":
        kwargs["action"] = "append"
    elif option.type == "dict":
        # The option layer takes a mapping, not its text: JSON is how a flag writes one.
        kwargs.update(type=json_mapping, metavar=metavar or "JSON")
    parser.add_argument(*flags, **kwargs)


def json_mapping(text: str) -> Dict[str, Any]:
    """The mapping a dict option's flag writes as JSON, or argparse's error."""
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not JSON") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON mapping")
    return value
