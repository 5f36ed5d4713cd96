# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""recover_after_node_reboot.yml reads recover_db with these filters before it stops any
Slurm job: what the database modules would refuse must be refused here, named, and never
with a password's value."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.filter import database_settings

error_of = database_settings.database_settings_error


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"config_file": "/etc/arvados/config.yml", "cluster_id": "zzzzz"},
        {"db_host": "db.example", "db_port": "5432", "db_password": "x", "db_sslmode": "verify-full"},
        # community.postgresql's names, which the modules take as aliases.
        {"login_host": "db.example", "login_port": 5433, "ca_cert": "/etc/ssl/ca.pem"},
        {"db_connect_timeout": None},
    ],
)
def test_settings_the_modules_accept_pass(settings):
    assert error_of(settings) == ""


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"db_passwd": "Typo-Pw-1"}, "recover_db: unknown option(s): db_passwd"),
        ({"db_port": 0}, "recover_db: option db_port must be at least 1"),
        ({"db_sslmode": "sometimes"}, "recover_db: option db_sslmode must be one of disable, allow, prefer"),
        ({"db_host": "a", "login_host": "b"}, "recover_db: db_host given twice"),
        ({"config_file": "/c.yml", "database_yml": "/d.yml"}, "recover_db: config_file, database_yml: only one"),
        ("db_host=a", "recover_db must be a dict of database options, not str"),
    ],
)
def test_what_a_module_would_refuse_is_named(settings, message):
    assert error_of(settings).startswith(message)


def test_the_variable_is_named_as_the_play_names_it():
    assert error_of({"bogus": 1}, "reconcile_db").startswith("reconcile_db: unknown option(s): bogus (ansible-doc")


def test_a_password_value_is_never_shown():
    assert "Secret-Pw-2" not in error_of({"db_password": ["Secret-Pw-2"], "db_host": "a"})


@pytest.mark.parametrize(
    ("settings", "secret"),
    [
        ({"db_password": "x"}, True),
        ({"db_passwd": "x"}, True),
        ({"login_password": "x"}, True),
        ({"db_host": "a"}, False),
        ("db_password", False),
    ],
)
def test_a_key_naming_a_password_is_noticed(settings, secret):
    assert database_settings.names_a_password(settings) is secret
