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

Whatever it holds, the file must be one only root or the command's own user can change:
owned by one of them and writable by neither its group nor others. Its options name the
programs the command runs (``squeue_path``, ``scontrol_path``) and the database it
writes to, so a file another user can write would choose them for a command run as root.
Only a regular file is read (a symlink is followed: what its target is and who owns it
count): a FIFO would block the read for ever and a device would never end it; a file of
more than :data:`MAX_OPTIONS_FILE_BYTES` is refused. The same reading, with its own size
cap, serves Arvados' config files (:func:`read_trusted_file`).

Numbers are read as plain decimal only (decimal_number_loader): YAML 1.1's 1_000, 0x1F,
017 and 1:20 stay text, which a number option refuses naming the file (check_numbers).

Pure Python (3.8+); PyYAML when installed, else JSON only.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import re
import stat
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Type

from .errors import RecoveryError, cut
from .options import NUMBER_TYPES, Option, is_plain_decimal, option_error

# An options file is a few lines; reading more is reading some other file.
MAX_OPTIONS_FILE_BYTES = 65536
# The permissions a file holding a password may have: the owner's (libpq's rule for
# ~/.pgpass); and, for a file root owns, its group's read (PostgreSQL's rule for its key
# file, and what the roles write with their options file group).
_OTHERS_PERMISSIONS = stat.S_IRWXG | stat.S_IRWXO
_ROOT_GROUP_READ = stat.S_IRGRP
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
NOT_DECIMAL = (
    "must be a plain decimal number in an options file (YAML 1.1 reads underscores, 0x, 0b, "
    "a leading 0 and colons as other numbers: 1_000, 0x1F, 017, 1:20)"
)
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
    shown_path = cut(path)
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
    check_numbers(shown_path, values, table)
    return values


def check_numbers(shown_path: str, values: Mapping[str, Any], table: Mapping[str, Any]) -> None:
    """Refuse a number option whose text in the file is not a plain decimal number, naming
    the file (a flag may give the same option), the option and the value. The file is
    loaded with decimal_number_loader, so '1_000', '0x1F', '017' and '1:20' (numbers to
    YAML 1.1: 1000, 31, 15 and 80) reach here as written. Every other check of a value is
    the caller's parse, after its flags are merged."""
    for name, value in values.items():
        option = table[name]
        if option.get("type") not in NUMBER_TYPES or not isinstance(value, str):
            continue
        # As decimal_number_loader reads numbers, and so that its refusal is the same from a
        # file, a flag and a module.
        if not is_plain_decimal(value):
            raise RecoveryError(
                "options file %s: %s"
                % (shown_path, option_error(name, NOT_DECIMAL, value, option.get("no_log", False)))
            )


def _read_small_text(path: str, shown_path: str) -> Tuple[str, os.stat_result]:
    """(the file's text, its os.stat_result), read from one open file."""
    data, status = read_trusted_file("options file", path, MAX_OPTIONS_FILE_BYTES, RecoveryError)
    check_trusted_file("options file", path, status)
    try:
        return data.decode("utf-8"), status
    except UnicodeDecodeError:
        raise RecoveryError("options file %s is not UTF-8 text" % shown_path) from None


_KIND_WORDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    """'a FIFO (named pipe)', 'a directory'...: what a file that is not a regular one is."""
    for test, word in _KIND_WORDS:
        if test(mode):
            return word
    return "not a regular file"


def _is(path: str) -> str:
    """' is' or, when `path` is a symlink, " is a symlink to 'TARGET', which is"."""
    note = _link_note(path)
    return " is a symlink to %s, which is" % note[len(" (a symlink to ") : -1] if note else " is"


def _link_note(path: str) -> str:
    """' (a symlink to TARGET)' when `path` is a symlink, else ''."""
    try:
        if not os.path.islink(path):
            return ""
        return " (a symlink to '%s')" % cut(os.readlink(path))
    except OSError:
        return ""


def read_trusted_file(
    what: str, path: str, max_bytes: int, error: Type[RecoveryError] = RecoveryError
) -> Tuple[bytes, os.stat_result]:
    """(at most `max_bytes` bytes of the regular file at `path`, its os.stat_result), or
    `error` naming `what` (``options file``, ``config_file``) and the path.

    A symlink is followed. A FIFO, device, socket or directory is refused from its stat,
    before it is opened: opening a FIFO waits for a writer, reading /dev/zero never ends,
    and opening some devices does something. The file is then opened without waiting
    (O_NONBLOCK) and must still be the regular file looked at, so that one swapped in
    meanwhile is not read either. The caller checks its owner and mode
    (check_trusted_file) on the returned status, which is the opened file's."""
    shown_path = cut(path)
    try:
        looked = os.stat(path)
    except OSError as failure:
        raise error("cannot read %s %s%s: %s" % (what, shown_path, _link_note(path), failure.strerror)) from None
    if not stat.S_ISREG(looked.st_mode):
        raise error(
            "%s %s%s %s, not a regular file: refused without reading it"
            % (what, shown_path, _is(path), kind_of(looked.st_mode))
        )
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as failure:
        raise error("cannot read %s %s%s: %s" % (what, shown_path, _link_note(path), failure.strerror)) from None
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode) or (status.st_dev, status.st_ino) != (looked.st_dev, looked.st_ino):
            raise error("%s %s changed while it was opened: refused; try again" % (what, shown_path))
        try:
            data = handle.read(max_bytes + 1)
        except OSError as failure:
            raise error("cannot read %s %s: %s" % (what, shown_path, failure.strerror)) from None
    if len(data) > max_bytes:
        raise error(
            "%s %s%s is larger than %d bytes: refused without reading the rest"
            % (what, shown_path, _link_note(path), max_bytes)
        )
    return data, status


def _user_text(uid: int) -> str:
    try:
        import pwd  # pylint: disable=import-outside-toplevel

        return "uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
    except (ImportError, KeyError):
        return "uid %d" % uid


def check_trusted_file(
    what: str, path: str, status: os.stat_result, error: Type[RecoveryError] = RecoveryError
) -> None:
    """Refuse, whatever it holds, a file that a user other than root and this process's
    own could change: one owned by another user, or writable by its group or others."""
    mode = stat.S_IMODE(status.st_mode)
    me = os.geteuid()
    where = "%s %s%s" % (what, cut(path), _link_note(path))
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise error(
            "%s is mode %04o, writable by %s: whoever can write it chooses what this command runs "
            "and changes, so it is refused whatever it holds; chmod go-w it"
            % (
                where,
                mode,
                "its group and others"
                if mode & stat.S_IWGRP and mode & stat.S_IWOTH
                else "its group"
                if mode & stat.S_IWGRP
                else "others",
            )
        )
    if status.st_uid not in (0, me):
        raise error(
            "%s is owned by %s, neither root nor this command's user (%s): its owner could change "
            "what this command runs and changes, so it is refused whatever it holds; chown it to root"
            % (where, _user_text(status.st_uid), _user_text(me))
        )


def _parse_options(text: str, shown_path: str) -> Any:
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return _json_options(text, shown_path)
    try:
        return yaml.load(text, Loader=decimal_number_loader(yaml))  # a SafeLoader subclass
    except yaml.YAMLError:
        # PyYAML quotes the offending text, which may be the password: say only where.
        raise RecoveryError("options file %s is not valid YAML" % shown_path) from None


@functools.lru_cache(maxsize=1)
def text_scalar_loader(yaml: Any) -> Any:
    """A safe loader that keeps scalars as written, resolving only nulls and ``<<`` merges
    (how _database.settings reads Arvados' files, as Arvados' Go loader does)."""

    class TextScalarLoader(yaml.SafeLoader):
        pass

    TextScalarLoader.yaml_implicit_resolvers = {}
    TextScalarLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])
    TextScalarLoader.add_implicit_resolver(
        "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
    )
    return TextScalarLoader


@functools.lru_cache(maxsize=1)
def decimal_number_loader(yaml: Any) -> Any:
    """A safe loader that reads as numbers only plain decimal ones (5, -3, 0.5, 1.5e3):
    YAML 1.1's other forms (underscores, 0x, 0b, a leading 0 for octal, sexagesimal 1:20,
    .inf) stay text, as written, for check_numbers to refuse in a number option; in a text
    option (a password, a message) they are then what was written, not a number."""

    class DecimalNumberLoader(yaml.SafeLoader):
        pass

    DecimalNumberLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    DecimalNumberLoader.add_implicit_resolver(_INT_TAG, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
    DecimalNumberLoader.add_implicit_resolver(
        _FLOAT_TAG, re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"), list("-+0123456789.")
    )
    return DecimalNumberLoader


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
