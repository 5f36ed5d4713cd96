# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import os
import pwd
import sys

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.doc_fragments.arvados_db import ModuleDocFragment
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import argument_spec, excerpt
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.settings import (
    APPLICATION_NAME,
    CONNECTION_OPTIONS,
    DEFAULT_CONNECT_TIMEOUT,
    MAX_CONFIG_FILE_BYTES,
    REDACTED,
    resolve_database_settings,
)

SECRET = "Pw-4f7Q-distinctive-9zX"
NOBODY = pwd.getpwnam("nobody").pw_uid

ONE_CLUSTER = (
    """\
Clusters:
  zzzzz:
    ManagementToken: abc
    PostgreSQL:
      ConnectionPool: 32
      Connection:
        host: db.example.org
        port: "5433"
        user: arvados
        password: %s
        dbname: arvados_production
        sslmode: verify-full
"""
    % SECRET
)

TWO_CLUSTERS = """\
Clusters:
  aaaaa:
    PostgreSQL:
      Connection: {host: db-a, port: 5432, user: arvados, password: pa, dbname: arvados_a}
  bbbbb:
    PostgreSQL:
      Connection: {host: db-b, port: 5432, user: arvados, password: pb, dbname: arvados_b}
"""

NO_POSTGRESQL = """\
Clusters:
  zzzzz:
    Services:
      Controller:
        ExternalURL: https://zzzzz.example.org
"""

DATABASE_YML = (
    """\
default: &default
  adapter: postgresql
  template: template0
  encoding: utf8
  username: arvados
  password: %s
  host: localhost

development:
  <<: *default
  database: arvados_development

production:
  <<: *default
  database: arvados_production
  port: 5434
"""
    % SECRET
)


@pytest.fixture
def files(tmp_path):
    """Writes settings files; the default paths point here, never at /etc."""

    class Files:
        config_yml = tmp_path / "config.yml"
        database_yml = tmp_path / "api" / "database.yml"

        @staticmethod
        def write(path, text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return str(path)

        def resolve(self, **options):
            return resolve_database_settings(
                options,
                default_config_file=str(self.config_yml),
                default_database_yml=str(self.database_yml),
            )

        def error_of(self, **options):
            with pytest.raises(ConfigError) as raised:
                self.resolve(**options)
            return str(raised.value)

    return Files()


def test_single_cluster_config_file(files):
    path = files.write(files.config_yml, ONE_CLUSTER)
    settings = files.resolve(config_file=path)
    assert settings.as_psycopg_kwargs() == {
        "dbname": "arvados_production",
        "host": "db.example.org",
        "port": 5433,
        "user": "arvados",
        "password": SECRET,
        "sslmode": "verify-full",
        "connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "application_name": APPLICATION_NAME,
    }
    assert settings.source == "config_file %s, cluster zzzzz" % path


def test_psycopg_accepts_the_keyword_arguments(files):
    conninfo = pytest.importorskip("psycopg.conninfo")
    files.write(files.config_yml, ONE_CLUSTER)
    text = conninfo.make_conninfo("", **files.resolve().as_psycopg_kwargs())
    assert conninfo.conninfo_to_dict(text)["application_name"] == "arvados-fail-jobs"


def test_several_clusters_need_cluster_id(files):
    path = files.write(files.config_yml, TWO_CLUSTERS)
    message = files.error_of(config_file=path)
    assert message == "config_file %s defines several clusters (aaaaa, bbbbb); set cluster_id" % path


def test_cluster_id_picks_one_of_several(files):
    path = files.write(files.config_yml, TWO_CLUSTERS)
    settings = files.resolve(config_file=path, cluster_id="bbbbb")
    assert (settings.host, settings.dbname, settings.password) == ("db-b", "arvados_b", "pb")
    assert settings.source.endswith("cluster bbbbb")


def test_keys_that_are_no_cluster_ids_are_only_counted(files):
    path = files.write(files.config_yml, TWO_CLUSTERS + "  Password: x\n  %s: y\n" % SECRET)
    assert "(aaaaa, bbbbb, 2 other keys)" in files.error_of(config_file=path)


def test_unknown_cluster_id_lists_the_known_ones(files):
    files.write(files.config_yml, TWO_CLUSTERS)
    message = files.error_of(cluster_id="ccccc")
    assert "cluster_id ccccc is not in config_file" in message and "defines: aaaaa, bbbbb" in message


def test_config_file_without_postgresql_section(files):
    path = files.write(files.config_yml, NO_POSTGRESQL)
    assert "has no Clusters.<id>.PostgreSQL.Connection settings" in files.error_of(config_file=path)


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "Clusters: {}\n", "Clusters:\n  zzzzz: {}\n"])
def test_config_file_without_any_settings(files, text):
    path = files.write(files.config_yml, text)
    assert "has no Clusters.<id>.PostgreSQL.Connection settings" in files.error_of(config_file=path)


def test_explicitly_named_config_file_must_exist(files):
    missing = str(files.config_yml)
    assert files.error_of(config_file=missing) == "cannot read config_file %s: No such file or directory" % missing


def test_default_config_file_is_found(files):
    files.write(files.config_yml, ONE_CLUSTER)
    files.write(files.database_yml, DATABASE_YML)
    assert files.resolve().host == "db.example.org"


def test_default_config_file_without_postgresql_falls_back_to_database_yml(files):
    files.write(files.config_yml, NO_POSTGRESQL)
    path = files.write(files.database_yml, DATABASE_YML)
    settings = files.resolve()
    assert (settings.dbname, settings.port) == ("arvados_production", 5434)
    assert settings.source == "database_yml %s, production" % path


def test_default_config_file_without_postgresql_and_no_database_yml(files):
    files.write(files.config_yml, NO_POSTGRESQL)
    assert "has no Clusters.<id>.PostgreSQL.Connection settings" in files.error_of()


def test_ambiguous_default_config_file_does_not_fall_back(files):
    files.write(files.config_yml, TWO_CLUSTERS)
    files.write(files.database_yml, DATABASE_YML)
    assert "set cluster_id" in files.error_of()


def test_database_yml_production_section(files):
    path = files.write(files.database_yml, DATABASE_YML)
    settings = files.resolve(database_yml=path)
    assert settings.as_psycopg_kwargs() == {
        "dbname": "arvados_production",
        "host": "localhost",
        "port": 5434,
        "user": "arvados",
        "password": SECRET,
        "connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "application_name": APPLICATION_NAME,
    }


def test_database_yml_is_found_when_there_is_no_config_yml(files):
    files.write(files.database_yml, DATABASE_YML)
    assert files.resolve().dbname == "arvados_production"


def test_database_yml_without_production(files):
    path = files.write(files.database_yml, "development:\n  database: dev\n")
    assert "has no production section" in files.error_of(database_yml=path)


def test_database_yml_of_another_adapter(files):
    path = files.write(files.database_yml, "production:\n  adapter: mysql2\n  database: x\n")
    assert "uses adapter 'mysql2', not PostgreSQL" in files.error_of(database_yml=path)


def test_erb_value_is_refused_and_names_the_key_and_option(files):
    path = files.write(files.database_yml, DATABASE_YML.replace(SECRET, "<%= ENV['ARVADOS_DB_PASSWORD'] %>"))
    message = files.error_of(database_yml=path)
    assert "production.password computed with ERB" in message and "give db_password instead" in message
    assert "ARVADOS_DB_PASSWORD" not in message


def test_erb_value_replaced_by_an_option_is_fine(files):
    path = files.write(files.database_yml, DATABASE_YML.replace(SECRET, "<%= ENV['ARVADOS_DB_PASSWORD'] %>"))
    assert files.resolve(database_yml=path, db_password="from-vault").password == "from-vault"


def test_erb_code_refuses_the_whole_file(files):
    text = DATABASE_YML.replace("  port: 5434\n", "  <% if ENV['X'] %>\n  port: 5434\n  <% end %>\n")
    path = files.write(files.database_yml, text)
    message = files.error_of(database_yml=path, db_port=5432, db_password="x")
    assert "holds ERB code (<% %>) on line 16, 18" in message


def test_erb_in_a_comment_is_ignored(files):
    path = files.write(files.database_yml, "# generated by <% tool %>\n" + DATABASE_YML)
    assert files.resolve(database_yml=path).password == SECRET


def test_explicit_options_win_per_key(files):
    path = files.write(files.config_yml, ONE_CLUSTER)
    settings = files.resolve(config_file=path, db_host="10.0.0.5", db_port=6432, db_password="", db_user=None)
    assert (settings.host, settings.port, settings.user, settings.password) == (
        "10.0.0.5",
        6432,
        "arvados",
        SECRET,
    )
    assert settings.source == "config_file %s, cluster zzzzz; db_host, db_port from options" % path


def test_explicit_options_alone(files):
    settings = files.resolve(db_name="arvados", db_connect_timeout=3)
    assert settings.as_psycopg_kwargs() == {
        "dbname": "arvados",
        "connect_timeout": 3,
        "application_name": APPLICATION_NAME,
    }
    assert settings.source == "options"


def test_the_ca_certificate_is_libpqs_sslrootcert_from_the_option_or_either_file(files):
    settings = files.resolve(db_name="arvados", db_sslmode="verify-full", db_ca_cert="/etc/ssl/db-ca.pem")
    assert settings.as_psycopg_kwargs()["sslrootcert"] == "/etc/ssl/db-ca.pem"
    config = files.write(
        files.config_yml,
        "Clusters:\n  zzzzz:\n    PostgreSQL:\n      Connection:\n        dbname: a\n        sslrootcert: /etc/ca.pem\n",
    )
    assert files.resolve(config_file=config).sslrootcert == "/etc/ca.pem"
    database_yml = files.write(files.database_yml, "production:\n  database: a\n  sslrootcert: /etc/rails-ca.pem\n")
    assert files.resolve(config_file="", database_yml=database_yml).sslrootcert == "/etc/rails-ca.pem"


def test_no_database_name_anywhere_says_the_default_files_are_missing(files):
    # Issue 42 item 6: a host without /etc/arvados/config.yml was told "set db_name".
    assert files.error_of(db_host="db") == (
        "no database settings: %s does not exist and %s does not exist, and no db_name is given; "
        "name the cluster's file with config_file (or database_yml on older clusters), or give "
        "db_name (and db_host, db_user... as needed)" % (files.config_yml, files.database_yml)
    )


def test_no_database_name_with_the_files_skipped_says_so(files):
    assert files.error_of(config_file="", database_yml="").startswith(
        "no database settings: config_file is '' (skipped) and database_yml is '' (skipped), and no db_name"
    )
    assert files.error_of(config_file="").startswith(
        "no database settings: config_file is '' (skipped) and %s does not exist, and no db_name" % files.database_yml
    )
    files.write(files.database_yml, "production:\n  database: a\n")
    assert files.resolve(config_file="").dbname == "a"


def test_no_database_name_in_the_file(files):
    path = files.write(files.config_yml, ONE_CLUSTER.replace("        dbname: arvados_production\n", ""))
    message = files.error_of(config_file=path, db_host="db")
    assert (
        message == "no database name: none in the settings from config_file %s, cluster zzzzz; db_host from options; "
        "set it there or give db_name" % path
    )


def test_empty_path_skips_a_default_file(files):
    files.write(files.config_yml, ONE_CLUSTER)
    files.write(files.database_yml, DATABASE_YML)
    assert files.resolve(config_file="").dbname == "arvados_production"
    assert files.resolve(config_file="").port == 5434
    assert files.resolve(config_file="", database_yml="", db_name="x").source == "options"


@pytest.mark.parametrize(
    "options, named",
    [
        ({"config_file": "a.yml", "database_yml": "b.yml"}, "config_file and database_yml"),
        ({"cluster_id": "zzzzz", "database_yml": "b.yml"}, "cluster_id and database_yml"),
    ],
)
def test_mutually_exclusive_options(files, options, named):
    assert files.error_of(**options) == "options %s cannot be used together" % named


def test_cluster_id_without_a_config_file(files):
    files.write(files.database_yml, DATABASE_YML)
    assert "cluster_id zzzzz given but no config.yml is read" in files.error_of(cluster_id="zzzzz")


@pytest.mark.parametrize("port", ["abc", "70000", "0", "-1", "54 32", "5432.0"])
def test_bad_port_in_a_file(files, port):
    path = files.write(files.config_yml, ONE_CLUSTER.replace('"5433"', '"%s"' % port))
    message = files.error_of(config_file=path)
    assert "database port %r" % port in message and "is not a number from 1 to 65535" in message


@pytest.mark.parametrize("port", [0, 65536, "x"])
def test_bad_explicit_port(files, port):
    assert "is not a number from 1 to 65535" in files.error_of(db_name="x", db_port=port)


def test_bad_sslmode(files):
    path = files.write(files.config_yml, ONE_CLUSTER.replace("verify-full", "always"))
    assert "sslmode 'always'" in files.error_of(config_file=path)


@pytest.mark.parametrize("timeout", [0, -3, "soon"])
def test_bad_connect_timeout(files, timeout):
    assert "db_connect_timeout" in files.error_of(db_name="x", db_connect_timeout=timeout)


def test_values_are_kept_as_written(files):
    text = ONE_CLUSTER.replace(SECRET, "0123").replace("arvados_production", "yes")
    settings = files.resolve(config_file=files.write(files.config_yml, text))
    assert (settings.password, settings.dbname) == ("0123", "yes")


def test_empty_values_count_as_unset(files):
    text = ONE_CLUSTER.replace("db.example.org", '""').replace('"5433"', "")
    settings = files.resolve(config_file=files.write(files.config_yml, text))
    assert (settings.host, settings.port) == (None, None)


def test_unreadable_path(files, tmp_path):
    assert files.error_of(config_file=str(tmp_path)) == (
        "config_file %s is a directory, not a regular file: refused without reading it" % tmp_path
    )
    missing = str(tmp_path / "missing.yml")
    assert files.error_of(config_file=missing) == "cannot read config_file %s: No such file or directory" % missing


def test_file_that_is_not_utf8(files):
    path = str(files.config_yml)
    files.config_yml.write_bytes(b"Clusters:\n  zzzzz: \xff\xfe\n")
    assert files.error_of(config_file=path) == "config_file %s is not UTF-8 text" % path


def test_missing_pyyaml_is_explained(files, monkeypatch):
    path = files.write(files.config_yml, ONE_CLUSTER)
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert "needs PyYAML (Debian: apt install python3-yaml)" in files.error_of(config_file=path)


MALFORMED_WITH_THE_PASSWORD = {
    "unterminated quote": ONE_CLUSTER.replace(SECRET, '"%s' % SECRET),
    "bad indentation": ONE_CLUSTER.replace("        password:", "      password:"),
    "tab": ONE_CLUSTER.replace("        password:", "\tpassword:"),
    "password as a cluster id": "Clusters:\n  zzzzz: {}\n  %s: x\n" % SECRET,
    "password in a list": ONE_CLUSTER.replace("password: %s" % SECRET, "password: [%s]" % SECRET),
    "password with a python tag": ONE_CLUSTER.replace(SECRET, "!!python/name:%s" % SECRET),
    "password with an unknown tag": ONE_CLUSTER.replace(SECRET, "!%s x" % SECRET),
    "password as an undefined alias": ONE_CLUSTER.replace(SECRET, "*%s" % SECRET),
    "bad port": ONE_CLUSTER.replace('"5433"', "fivefour"),
    "bad sslmode": ONE_CLUSTER.replace("verify-full", "always"),
    "connection is text": "Clusters:\n  zzzzz:\n    PostgreSQL:\n      Connection: %s\n" % SECRET,
    "clusters is text": "Clusters: %s\n" % SECRET,
    "no dbname": ONE_CLUSTER.replace("        dbname: arvados_production\n", ""),
    "second cluster": ONE_CLUSTER + "  yyyyy: {}\n",
}


@pytest.mark.parametrize("text", list(MALFORMED_WITH_THE_PASSWORD.values()), ids=list(MALFORMED_WITH_THE_PASSWORD))
def test_password_is_in_no_config_file_error(files, text):
    path = files.write(files.config_yml, text)
    with pytest.raises(ConfigError) as raised:
        files.resolve(config_file=path)
    assert SECRET not in str(raised.value) and SECRET not in repr(raised.value)
    assert SECRET not in str(raised.value.__cause__) + str(raised.value.__context__)


@pytest.mark.parametrize(
    "text",
    [
        DATABASE_YML.replace("  port: 5434\n", "  port: [5434\n"),
        DATABASE_YML.replace("  port: 5434\n", "  <% if x %>\n"),
        DATABASE_YML.replace("adapter: postgresql", "adapter: %s" % SECRET.replace("Pw", "my")) + "\n",
        DATABASE_YML.replace("  port: 5434\n", "  port: 99999\n"),
    ],
)
def test_password_is_in_no_database_yml_error(files, text):
    path = files.write(files.database_yml, text)
    with pytest.raises(ConfigError) as raised:
        files.resolve(database_yml=path)
    assert SECRET not in str(raised.value)


def test_yaml_syntax_errors_give_the_position(files):
    path = files.write(files.config_yml, ONE_CLUSTER.replace(SECRET, '"%s' % SECRET))
    assert files.error_of(config_file=path).startswith("config_file %s is not valid YAML at line " % path)


def test_password_is_masked_in_repr_str_and_redacted(files):
    settings = files.resolve(config_file=files.write(files.config_yml, ONE_CLUSTER))
    for shown in (repr(settings), str(settings), repr(settings.redacted()), "%s" % [settings]):
        assert SECRET not in shown
    assert settings.redacted()["password"] == REDACTED
    assert settings.redacted()["source"] == settings.source
    assert "host='db.example.org'" in repr(settings)


def test_redacted_without_a_password_says_nothing_about_one(files):
    assert "password" not in files.resolve(db_name="x").redacted()


def test_config_errors_are_one_line_recovery_errors():
    assert issubclass(ConfigError, RecoveryError)
    assert str(ConfigError("first\nsecond")) == "first second"


def test_argument_spec_is_ansible_ready():
    spec = argument_spec(CONNECTION_OPTIONS)
    assert set(spec) == set(CONNECTION_OPTIONS)
    assert all("help" not in option for option in spec.values())
    assert spec["db_password"]["no_log"] is True
    assert [name for name, option in spec.items() if option.get("no_log")] == ["db_password"]


def test_doc_fragment_matches_the_argument_spec():
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    spec = argument_spec(CONNECTION_OPTIONS)
    assert list(documented) == list(spec)
    for name, option in spec.items():
        doc = documented[name]
        assert doc["type"] == option["type"], name
        assert doc.get("default") == option.get("default"), name
        assert doc.get("choices") == option.get("choices"), name
        assert doc.get("aliases") == option.get("aliases"), name
        assert doc["description"], name
    assert "no_log" in " ".join(documented["db_password"]["description"])


# -- hosts: what libpq can resolve, or refused by name ------------------------------------

NO_FILE = {"config_file": "", "database_yml": "", "db_name": "arvados"}


@pytest.mark.parametrize(
    "host",
    [
        "db.example.org",
        "db.example.org.",
        "localhost",
        "db-1",
        "under_score.example",
        "10.0.0.5",
        "::1",
        "fe80::1%eth0",
        "/var/run/postgresql",
        "db-a.example,db-b.example",
        "a" * 63 + ".example",
    ],
)
def test_a_host_libpq_can_take_is_kept(host):
    assert resolve_database_settings(dict(NO_FILE, db_host=host)).host == host


LONG_LABEL = "a" * 64


@pytest.mark.parametrize(
    "host, problem",
    [
        ("db..example.org", "an empty label (two dots in a row, or a dot first)"),
        (".example.org", "an empty label (two dots in a row, or a dot first)"),
        (LONG_LABEL + ".example", "a label of 64 characters, more than the 63 of DNS"),
        (".".join(["a" * 50] * 6), "305 characters, more than the 253 of a DNS name"),
        ("dbé.example", "it has characters other than ASCII (write an internationalised name in its xn-- form)"),
        ("db\u200b.example", "it has characters other than ASCII (write an internationalised name in its xn-- form)"),
        ("db example", "the label 'db example' holds what no host name does (letters, digits, - and _ only; no - first or last)"),
        ("-db.example", "the label '-db' holds what no host name does (letters, digits, - and _ only; no - first or last)"),
        ("db-a,", "an empty host in the list"),
    ],
)  # fmt: skip
def test_a_host_python_or_libpq_cannot_resolve_is_refused_by_name(host, problem):
    with pytest.raises(ConfigError) as raised:
        resolve_database_settings(dict(NO_FILE, db_host=host))
    assert str(raised.value) == (
        "option db_host must be a host name, an IP address or a socket directory (/...): %s, got %s"
        % (problem, excerpt(host))
    )


def test_the_refused_host_is_what_python_fails_to_encode():
    # What the check stands in for: the IDNA codec's error, which names no option.
    for host in ("db..example.org", LONG_LABEL + ".example"):
        with pytest.raises(UnicodeError):
            host.encode("idna")


def test_a_host_in_the_config_file_is_refused_with_its_key(files):
    path = files.write(files.config_yml, ONE_CLUSTER.replace("db.example.org", "db..example.org"))
    assert files.error_of() == (
        "the host of config_file %s, cluster zzzzz must be a host name, an IP address or a socket "
        "directory (/...): an empty label (two dots in a row, or a dot first), got 'db..example.org'" % path
    )
    # db_host replaces the file's: the file's is then not used, nor checked.
    assert files.resolve(db_host="db.example.net").host == "db.example.net"


def test_a_long_host_is_cut_in_the_message():
    host = "a" * 100000
    with pytest.raises(ConfigError) as raised:
        resolve_database_settings(dict(NO_FILE, db_host=host))
    assert str(raised.value).endswith("got '%s...' (100000 characters)" % ("a" * 60))
    assert len(str(raised.value)) < 300


# -- the settings files: regular, small, and changed by nobody else ----------------------


def test_a_fifo_as_config_file_is_refused_without_waiting_for_a_writer(files, tmp_path):
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    assert files.error_of(config_file=str(fifo)) == (
        "config_file %s is a FIFO (named pipe), not a regular file: refused without reading it" % fifo
    )


def test_a_device_as_config_file_is_refused_without_reading_it(files):
    assert files.error_of(config_file="/dev/zero") == (
        "config_file /dev/zero is a character device, not a regular file: refused without reading it"
    )
    assert files.error_of(database_yml="/dev/zero") == (
        "database_yml /dev/zero is a character device, not a regular file: refused without reading it"
    )


def test_a_symlink_to_a_device_says_it_is_a_symlink(files, tmp_path):
    link = tmp_path / "config.yml"
    link.symlink_to("/dev/zero")
    assert files.error_of(config_file=str(link)) == (
        "config_file %s is a symlink to '/dev/zero', which is a character device, not a regular file: "
        "refused without reading it" % link
    )


def test_a_symlinked_config_yml_is_followed_as_arvados_follows_it(files, tmp_path):
    real = files.write(tmp_path / "etc-arvados" / "config.yml", ONE_CLUSTER)
    files.config_yml.symlink_to(real)
    settings = files.resolve()
    assert (settings.host, settings.dbname) == ("db.example.org", "arvados_production")


def test_a_config_file_over_the_cap_is_refused(files, tmp_path):
    big = tmp_path / "big.yml"
    with open(big, "wb") as handle:
        handle.truncate(MAX_CONFIG_FILE_BYTES + 1)
    assert files.error_of(config_file=str(big)) == (
        "config_file %s is larger than %d bytes: refused without reading the rest" % (big, MAX_CONFIG_FILE_BYTES)
    )


def test_a_config_file_at_the_cap_is_read(files, tmp_path):
    path = tmp_path / "padded.yml"
    text = ONE_CLUSTER + "#" * (MAX_CONFIG_FILE_BYTES - len(ONE_CLUSTER) - 1) + "\n"
    path.write_text(text)
    assert len(text) == MAX_CONFIG_FILE_BYTES
    assert files.resolve(config_file=str(path)).dbname == "arvados_production"


@pytest.mark.parametrize("mode, who", [(0o666, "its group and others"), (0o646, "others"), (0o664, "its group")])
def test_a_config_file_others_can_write_is_refused_whatever_it_holds(files, mode, who):
    path = files.write(files.config_yml, ONE_CLUSTER)
    os.chmod(path, mode)
    message = files.error_of(config_file=path)
    assert message == (
        "config_file %s is mode %04o, writable by %s: whoever can write it chooses what this command runs and "
        "changes, so it is refused whatever it holds; chmod go-w it" % (path, mode, who)
    )
    assert SECRET not in message


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_config_file_owned_by_another_user_is_refused(files):
    path = files.write(files.database_yml, DATABASE_YML)
    os.chmod(path, 0o600)
    os.chown(path, NOBODY, -1)
    assert files.error_of(database_yml=path) == (
        "database_yml %s is owned by uid %d (nobody), neither root nor this command's user (uid 0 (root)): its "
        "owner could change what this command runs and changes, so it is refused whatever it holds; chown it "
        "to root" % (path, NOBODY)
    )


def test_a_root_owned_config_file_readable_by_its_group_is_read(files):
    path = files.write(files.config_yml, ONE_CLUSTER)
    os.chmod(path, 0o640)
    assert files.resolve(config_file=path).dbname == "arvados_production"
