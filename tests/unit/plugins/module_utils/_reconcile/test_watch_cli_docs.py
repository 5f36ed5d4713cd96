# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the guide's watch page, the role's README and `arvados-recovery-watch --help` say of the
watch's options, against the one table that defines them (watch_cli.ALL_OPTIONS; issue 42
item 5)."""

from __future__ import annotations

import re

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_cli
from tests.examples.doc_examples import REPO_ROOT

WATCH_PAGE = REPO_ROOT / "docs" / "docsite" / "rst" / "guide_watch.rst"


def watch_section() -> str:
    return WATCH_PAGE.read_text(encoding="utf-8")


def stated_defaults(text: str) -> dict:
    """``name`` (default ``value`` ... as the guide (RST) writes an option's default."""
    return dict(re.findall(r"``(\w+)``\s+\(default\s+``([^`]*)``", text))


def test_the_watch_page_states_each_of_the_watch_options_defaults_as_the_table_has_it():
    stated = stated_defaults(watch_section())
    assert set(watch_cli.WATCH_OPTIONS) <= set(stated), "guide_watch.rst gives no default for %s" % sorted(
        set(watch_cli.WATCH_OPTIONS) - set(stated)
    )
    for name, value in stated.items():
        assert name in watch_cli.ALL_OPTIONS, name
        assert value == watch_cli.default_text(watch_cli.ALL_OPTIONS[name].default), name


def test_the_role_readme_states_the_commands_defaults_as_the_table_has_them():
    text = (REPO_ROOT / "roles" / "recovery_watch" / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `recovery_watch_options` |"))
    stated = dict(re.findall(r"`(\w+): ([^`]+)`", row))
    assert stated, "the row of recovery_watch_options states no default"
    for name, value in stated.items():
        assert value == watch_cli.default_text(watch_cli.ALL_OPTIONS[name].default), name


def flag_helps() -> dict:
    helps: dict = {}
    for action in watch_cli.build_parser()._actions:
        # A bool's first flag (--name) has the option's help; --no-name only says the opposite.
        if action.dest in watch_cli.ALL_OPTIONS:
            helps.setdefault(action.dest, action.help)
    return helps


def test_help_gives_every_default_of_the_table():
    helps = flag_helps()
    for name, option in watch_cli.ALL_OPTIONS.items():
        if name in watch_cli._NO_FLAG or option.default is None:
            continue
        shown = helps[name] % {}
        assert "default: %s" % watch_cli.default_text(option.default) in shown, (name, shown)


def test_help_calls_only_the_modules_options_the_modules():
    helps = flag_helps()
    for name in watch_cli.WATCH_OPTIONS:
        assert "module's option" not in helps[name], name
    assert "repeat the flag or give a comma-separated list" in helps["kinds"]
    assert "at most 60" in helps["systemctl_timeout"] % {}


def test_the_help_text_is_what_argparse_prints(capsys):
    try:
        watch_cli.build_parser().parse_args(["--help"])
    except SystemExit:
        pass
    printed = " ".join(capsys.readouterr().out.split())
    assert "default: crunch-dispatch-slurm.service" in printed.replace("- ", "-")
    assert "default: /var/lib/prometheus/node-exporter/arvados_recovery.prom" in printed.replace("- ", "-")
    assert "default: 10; at most 60" in printed
