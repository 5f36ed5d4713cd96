# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one option layer of the modules and the command.

An option table maps names to :class:`Option`: what Ansible needs (type, default,
choices, aliases, elements, no_log), the command's flag help, and the check of its
values (:class:`Range` for numbers: finite, at least or above a minimum, at most a
maximum). From a table come the modules' argument spec (:func:`argument_spec`), the
command's flags, and the one parse of given values (:func:`parse`), so that a mistake
gets the same message from every module and from the command: the option's name and
the value, never the value of a no_log option.

Ansible has typed the values a module gets; the command's options file and flags give
text (``retry: "no"``), which ``parse(..., from_text=True)`` converts as Ansible would.
A Python caller of an engine gives typed values and gets them checked, not converted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping as MappingBase
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Pattern, Sequence, Type

from .errors import ConfigError, cut, shown

# What a bool option accepts as text (an options file, a flag), as Ansible's `boolean`.
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
NUMBER_TYPES = ("int", "float")
TEXT_TYPES = ("str", "path")
# How much of a long value a message shows.
EXCERPT_CHARACTERS = 60
# A number written as text: ASCII digits only. Python's int() and float() also take other
# scripts' digits ('\u0665' is 5) and underscores ('1_000'), which no operator means to give.
_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = r"[+-]?(?:(?:{integer}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)"
_FLOAT_TEXT = re.compile(_DECIMAL.format(integer="[0-9]+"), re.ASCII | re.IGNORECASE)
# The same without a leading zero: YAML 1.1 reads 017 as octal 15.
_PLAIN_DECIMAL_TEXT = re.compile(_DECIMAL.format(integer="(?:0|[1-9][0-9]*)"), re.ASCII | re.IGNORECASE)
# What surrounds a number in text and is dropped, as YAML and a shell leave it.
_NUMBER_SPACE = " \t\r\n"
NOT_ASCII_NUMBER = "must be a number written with the ASCII digits 0-9 (no underscores, no other digits)"
# The keys of an option that are not Ansible's: the flag help, for people.
_NOT_FOR_ANSIBLE = ("help",)


class Range:
    """The values a number option takes: finite, at least `minimum` (above it with
    `above`), at most `maximum`. Every number option has a maximum, what the value's
    consumer accepts (option_bounds), so a value past it is refused by name before
    anything is read or changed."""

    def __init__(self, maximum: float, minimum: Optional[float] = None, above: bool = False):
        self.maximum = maximum
        self.minimum = minimum
        self.above = above

    def __call__(self, name: str, value: Any, secret: bool = False) -> Any:
        # nan compares false with every bound and inf never ends a wait: both are refused first.
        if not math.isfinite(value):
            raise option_error(name, "must be a finite number", value, secret)
        if self.minimum is not None:
            if self.above and value <= self.minimum:
                raise option_error(name, "must be above %s" % number_text(self.minimum), value, secret)
            if not self.above and value < self.minimum:
                raise option_error(name, "must be at least %s" % number_text(self.minimum), value, secret)
        if value > self.maximum:
            raise option_error(name, "must be at most %s" % number_text(self.maximum), value, secret)
        return value

    def __repr__(self) -> str:
        return "Range(maximum=%r, minimum=%r, above=%r)" % (self.maximum, self.minimum, self.above)


def seconds(maximum: float, minimum: float = 0.0, above: bool = False) -> Range:
    """A duration: at least `minimum` seconds (above it with `above`), at most `maximum`."""
    return Range(maximum, minimum, above)


def count(maximum: int, minimum: int = 1) -> Range:
    """A number of things (rows, processes): at least `minimum`, at most `maximum`."""
    return Range(maximum, minimum)


class Option(MappingBase):
    """One option: read as a mapping it is its Ansible argument spec entry plus ``help``;
    ``check`` (a Range, or any callable of name, value and secret returning the value) is
    applied by parse after the type and the choices. A ``required`` option has no default:
    parse refuses a call without it, as Ansible refuses a task without it."""

    def __init__(
        self,
        type: str,  # pylint: disable=redefined-builtin
        default: Any = None,
        help: str = "",  # pylint: disable=redefined-builtin
        choices: Optional[Iterable[Any]] = None,
        aliases: Optional[Sequence[str]] = None,
        elements: Optional[str] = None,
        no_log: bool = False,
        check: Any = None,
        required: bool = False,
    ):
        if required and default is not None:
            # Ansible's validate-modules refuses the pair: the default would never apply.
            raise ValueError("a required option has no default")
        self.type = type
        self.default = default
        self.help = help
        self.choices = list(choices) if choices is not None else None
        self.aliases = list(aliases) if aliases else None
        self.elements = elements
        self.no_log = no_log
        self.check = check
        self.required = required
        self._spec = {"type": type, "default": default}
        for key, value in (
            ("required", required or None),
            ("choices", self.choices),
            ("aliases", self.aliases),
            ("elements", elements),
            ("no_log", no_log or None),
            ("help", help or None),
        ):
            if value is not None:
                self._spec[key] = value

    def __getitem__(self, key: str) -> Any:
        return self._spec[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._spec)

    def __len__(self) -> int:
        return len(self._spec)

    def __repr__(self) -> str:
        return "Option(%s, check=%r)" % (", ".join("%s=%r" % item for item in self._spec.items()), self.check)

    @property
    def maximum(self) -> Optional[float]:
        """The largest value a number option takes, as its Range says."""
        return getattr(self.check, "maximum", None)

    def parse_value(self, name: str, value: Any, from_text: bool = False) -> Any:
        """`value` typed and checked, or a ConfigError naming option `name` and the value
        (not the value of a no_log option). None passes when the option's default is None."""
        if value is None and self.default is None:
            return None
        secret = self.no_log
        self._check_choices(name, value)
        typed = self._typed(value, from_text)
        if typed is None:
            if self.type in NUMBER_TYPES and from_text and _python_reads_as_number(value):
                raise option_error(name, NOT_ASCII_NUMBER, value, secret)
            raise option_error(name, "must be of type %s" % self.type, value, secret)
        check_text(name, typed, secret)
        if self.check is not None:
            typed = self.check(name, typed, secret)
        return typed

    def _check_choices(self, name: str, value: Any) -> None:
        if not self.choices:
            return
        given = value if self.type == "list" and isinstance(value, (list, tuple)) else [value]
        for element in given:
            if element not in self.choices:
                raise option_error(name, "must be one of %s" % ", ".join(map(str, self.choices)), element, self.no_log)

    def _typed(self, value: Any, from_text: bool) -> Any:
        """The value as the option's type; None when it is not one."""
        kind = self.type
        if kind == "bool":
            return value if isinstance(value, bool) else (text_to_bool(value) if from_text else None)
        if kind in NUMBER_TYPES:
            return _number(value, kind, from_text)
        if kind == "list":
            items = [value] if from_text and isinstance(value, str) else value
            if not isinstance(items, (list, tuple)):
                return None
            if self.elements == "str" and not all(isinstance(item, str) for item in items):
                return None
            return list(items)
        if kind in TEXT_TYPES:
            return value if isinstance(value, str) else None
        if kind == "dict":
            return value if isinstance(value, Mapping) else None
        return value


def _number(value: Any, kind: str, from_text: bool) -> Any:
    if isinstance(value, bool):
        return None
    if kind == "float" and isinstance(value, (int, float)):
        # As Ansible converts it: a message then shows 3.0 whoever gave 3.
        return float(value)
    if isinstance(value, int):
        return value
    if kind == "int" and isinstance(value, float):
        # A whole float is what YAML and JSON make of 1e23 or 5.0.
        return int(value) if from_text and math.isfinite(value) and value.is_integer() else None
    if not from_text or not isinstance(value, str):
        return None
    text = value.strip(_NUMBER_SPACE)
    if kind == "int" and _INT_TEXT.fullmatch(text):
        return int(text)
    if kind == "float" and _FLOAT_TEXT.fullmatch(text):
        return float(text)
    if not _FLOAT_TEXT.fullmatch(text):
        return None
    # YAML reads 1e23 (no dot) as text: a whole number written so is still a whole number.
    number = _number(value, "float", from_text) if kind == "int" else None
    return _number(number, "int", from_text) if number is not None else None


def is_plain_decimal(text: str) -> bool:
    """Whether `text` (space around it aside) is a decimal number of ASCII digits with no
    leading zero, or a word the option layer reads as one (inf, nan): no text YAML 1.1 or
    Python reads as another number."""
    return _PLAIN_DECIMAL_TEXT.fullmatch(text.strip(_NUMBER_SPACE)) is not None


def _python_reads_as_number(value: Any) -> bool:
    """True for text Python's float() reads but the option layer does not: '\u0665',
    '1_000', full-width digits. Such a value gets a message of its own."""
    if not isinstance(value, str) or _FLOAT_TEXT.fullmatch(value.strip(_NUMBER_SPACE)):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def text_to_bool(value: Any) -> Optional[bool]:
    """True or False from what a user may write for a bool (yes, off, 1...); None otherwise."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def auto_or_bool(name: str, value: Any, secret: bool = False) -> Any:
    """The check of an option that is 'auto' or a bool: 'auto', True or False from what a
    user may write for it."""
    if str(value).strip().lower() == "auto":
        return "auto"
    mode = text_to_bool(value)
    if mode is None:
        raise option_error(name, "must be auto, true or false", value, secret)
    return mode


def parse(table: Mapping[str, Option], params: Mapping[str, Any], from_text: bool = False) -> Dict[str, Any]:
    """Every option of `table`: the value given in `params` typed and checked, else the
    default. A name the table does not know, a required option missing (None counts as
    missing, as a module's unset option is), or a bad value, is a ConfigError."""
    unknown = sorted(set(params) - set(table))
    if unknown:
        raise ConfigError("unknown option(s): %s" % ", ".join(unknown))
    missing = [name for name, option in table.items() if option.required and params.get(name) is None]
    if missing:
        raise ConfigError("missing required option(s): %s" % ", ".join(missing))
    values = {name: _fresh(option.default) for name, option in table.items()}
    for name, value in params.items():
        if value is not None:
            values[name] = table[name].parse_value(name, value, from_text)
    return values


def option_fields(
    values: Mapping[str, Any], names: Iterable[str], renamed: Optional[Mapping[str, str]] = None
) -> Dict[str, Any]:
    """The keyword arguments of a checked options object (CleanupOptions, ReconcileOptions, a
    cancel request) from parse's `values`: the value of each option of `names` under the
    name of its field, the option's own unless `renamed` gives another. The options and the
    fields are then tied by name in one place, not by a hand-written list per object."""
    renamed = renamed or {}
    return {renamed.get(name, name): values[name] for name in names}


def check_given_numbers(table: Mapping[str, Option], given: Mapping[str, Any]) -> None:
    """Refuse a number option's value as it was given (under its name or an alias), before
    any conversion: AnsibleModule types int and float options with Python's int(), float()
    and Decimal(), which read other scripts' digits ('\u0665' is 5) and underscores
    ('1_000'), so the module's option would get a number nobody wrote. Parsed as the
    command parses its text, for the same message; a ConfigError names the option."""
    for name, option in table.items():
        if option.get("type") not in NUMBER_TYPES:
            continue
        for key in [name] + list(option.get("aliases") or []):
            if given.get(key) is not None:
                option.parse_value(name, given[key], from_text=True)


def _fresh(default: Any) -> Any:
    """A list default copied, so that no caller can change the table's."""
    return list(default) if isinstance(default, list) else default


def argument_spec(table: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The Ansible argument spec of a table: without help texts and checks, and without
    the defaults that are None."""
    return {
        name: {
            key: value
            for key, value in option.items()
            if key not in _NOT_FOR_ANSIBLE and not (key == "default" and value is None)
        }
        for name, option in table.items()
    }


def optional_match(
    name: str, value: Any, pattern: Pattern[str], requirement: str, error: Type[ConfigError] = ConfigError
) -> Optional[str]:
    """`value` when it is None or text `pattern` matches whole; else `error` with the one
    message of option_error, naming the option, what it must be and the value."""
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise error(str(option_error(name, requirement, value)))
    return value


def option_error(name: str, requirement: str, value: Any, secret: bool = False) -> ConfigError:
    """The one message for a bad value: ``option NAME REQUIREMENT, got VALUE``; a secret
    value is left out."""
    return ConfigError("option %s %s%s" % (name, requirement, "" if secret else ", got %s" % value_text(value)))


def value_text(value: Any) -> str:
    """A value for a message: text quoted, escaped and cut (excerpt), numbers as Python
    writes them."""
    return excerpt(value) if isinstance(value, str) else cut(value)


def check_text(name: str, value: Any, secret: bool = False) -> None:
    """A ConfigError naming option `name` when the text `value` (or an element of a list)
    holds what PostgreSQL and libpq cannot take: a NUL character, which no text column can
    store, or a lone surrogate, which is no character UTF-8 can encode. Found at a write,
    either would fail a batch after its Slurm jobs were cancelled."""
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


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def excerpt(text: str) -> str:
    """`text` quoted and escaped for a message (errors.shown), cut after
    EXCERPT_CHARACTERS with the length said."""
    if len(text) <= EXCERPT_CHARACTERS:
        return "'%s'" % shown(text)
    return "'%s...' (%d characters)" % (shown(text[:EXCERPT_CHARACTERS]), len(text))


def number_text(number: Any) -> str:
    """3600.0 as 3600, 0.5 as 0.5: how the documentation writes a bound."""
    return "%d" % number if float(number).is_integer() else repr(float(number))
