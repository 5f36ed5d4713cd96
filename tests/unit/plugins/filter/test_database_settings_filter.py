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


# -- cluster_settings: the installer's arvados_config_file, read on the controller ---------

cluster_settings = database_settings.cluster_settings
SECRET = "Cluster-Secret-0123"


def write_cluster_config(tmp_path, text):
    path = tmp_path / "xurid-config.yml"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


INSTALLER_CONFIG = (
    """
Clusters:
  xurid:
    PostgreSQL:
      Connection:
        user: arvados
        password: %s
        host: db.xurid.example
        port: "5432"
        dbname: arvados_xurid
    Containers:
      MaxDispatchAttempts: 7
    SystemRootToken: FIXMEDefaultSystemRootToken
"""
    % SECRET
)


def test_the_cluster_connection_becomes_the_modules_options_with_the_hosts_copy_skipped(tmp_path):
    path = write_cluster_config(tmp_path, INSTALLER_CONFIG)

    found = cluster_settings(path, "xurid")

    assert found["error"] == ""
    assert found["db"] == {
        "config_file": "",
        "db_host": "db.xurid.example",
        "db_port": 5432,
        "db_user": "arvados",
        "db_password": SECRET,
        "db_name": "arvados_xurid",
    }
    assert error_of(found["db"]) == ""
    assert found["cluster_id"] == "xurid"
    assert found["max_dispatch_attempts"] == {
        "value": 7,
        "source": "config_file %s, Clusters.xurid.Containers.MaxDispatchAttempts" % path,
    }


def test_without_a_cluster_id_the_only_cluster_is_read(tmp_path):
    found = cluster_settings(write_cluster_config(tmp_path, INSTALLER_CONFIG), "")
    assert (found["error"], found["cluster_id"]) == ("", "xurid")


def test_a_password_written_as_a_number_stays_the_text_arvados_reads(tmp_path):
    path = write_cluster_config(tmp_path, INSTALLER_CONFIG.replace(SECRET, "0123"))
    assert cluster_settings(path, "xurid")["db"]["db_password"] == "0123"


@pytest.mark.parametrize(
    ("text", "cluster_id", "message"),
    [
        (INSTALLER_CONFIG, "zzzzz", "cluster_id zzzzz is not in config_file"),
        (INSTALLER_CONFIG + "  zzzzz: {}\n", "", "defines several clusters (xurid, zzzzz); set cluster_id"),
        ("Clusters:\n  xurid:\n    SystemRootToken: x\n", "xurid", "has no Clusters.<id>.PostgreSQL.Connection"),
        (
            INSTALLER_CONFIG.replace("MaxDispatchAttempts: 7", "MaxDispatchAttempts: many"),
            "xurid",
            "not a whole number",
        ),
        ("Clusters: [%s\n" % SECRET, "xurid", "is not valid YAML"),
    ],
)
def test_what_is_wrong_is_said_naming_the_file_never_the_password(tmp_path, text, cluster_id, message):
    found = cluster_settings(write_cluster_config(tmp_path, text), cluster_id)
    assert found["error"].startswith("arvados_config_file: ")
    assert message in found["error"]
    assert SECRET not in found["error"] and "db" not in found


def test_a_missing_file_is_named(tmp_path):
    found = cluster_settings(str(tmp_path / "nowhere.yml"), "xurid")
    assert "cannot read config_file %s" % (tmp_path / "nowhere.yml") in found["error"]
