# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Connection options of the modules that work on the Arvados database
    # directly. Keep in step with CONNECTION_OPTIONS in
    # plugins/module_utils/_database/settings.py, which the modules and the
    # arvados-fail-jobs command build their options from.
    DOCUMENTATION = r"""
options:
  config_file:
    description:
      - Arvados cluster configuration to read the database settings from,
        C(Clusters.<id>.PostgreSQL.Connection) (C(host), C(port), C(user), C(password),
        C(dbname), C(sslmode), C(sslrootcert)). An empty string reads none.
      - When neither O(config_file) nor O(database_yml) is given, V(/etc/arvados/config.yml)
        is read if it exists and has the cluster's C(PostgreSQL.Connection), else
        V(/etc/arvados/api/database.yml) if it exists; otherwise only the C(db_*) options.
      - A file that is named or found but cannot be read is an error. Mutually exclusive
        with O(database_yml).
      - A symlink is followed. The file (O(config_file) or O(database_yml)) must be a regular
        file of at most 8 MiB, owned by root or the user the module runs as and writable by
        neither its group nor others; a FIFO or device is refused without being opened.
    type: path
  cluster_id:
    description:
      - The five-character cluster id (for example V(zzzzz)) whose settings to read
        from the config.yml. Needed only when the file defines several clusters; the
        error then lists the ids it defines.
      - Mutually exclusive with O(database_yml).
    type: str
  database_yml:
    description:
      - The database settings file of older Arvados API servers, section
        C(production) (C(database), C(username), C(password), C(host), C(port),
        C(sslmode), C(sslrootcert)), for example V(/etc/arvados/api/database.yml).
      - Values written with ERB (C(<%= ENV['PGPASSWORD'] %>)) are refused unless a
        C(db_*) option replaces them; a file with ERB code (C(<% if ... %>)) is
        refused whole, as only Rails can evaluate it.
      - An empty string reads none. Mutually exclusive with O(config_file) and
        O(cluster_id).
    type: path
  db_host:
    description:
      - Database host name, address, or directory of the local socket
        (for example V(db.example.org) or V(/var/run/postgresql)).
      - Like every C(db_*) option, it wins over the value from the settings file;
        an empty string counts as not given.
      - Unset everywhere, libpq's default applies (E(PGHOST), then the local socket).
      - A name must be ASCII labels of 1 to 63 characters (253 in all; an internationalised
        name in its C(xn--) form), else it is refused before any connection; several hosts
        are comma-separated, as libpq takes them.
    type: str
    aliases: [login_host]
  db_port:
    description:
      - Database port, for example V(5432), from V(1) to V(65535).
      - Unset everywhere, libpq's default applies (E(PGPORT), then 5432).
    type: int
    aliases: [login_port, port]
  db_name:
    description:
      - Database name, for example V(arvados_production).
      - Required unless the settings file gives it.
    type: str
    aliases: [login_db]
  db_user:
    description:
      - Database user, for example V(arvados).
      - Unset everywhere, libpq's default applies (E(PGUSER), then the login name).
    type: str
    aliases: [login_user]
  db_password:
    description:
      - Database password. It never appears in output, errors or logs
        (C(no_log)).
      - Unset everywhere, libpq looks in E(PGPASSWORD) and C(~/.pgpass).
    type: str
    aliases: [login_password]
  db_sslmode:
    description:
      - libpq C(sslmode) for the connection, for example V(verify-full).
      - Unset everywhere, libpq's default applies (E(PGSSLMODE), then V(prefer)).
    type: str
    choices: [disable, allow, prefer, require, verify-ca, verify-full]
    aliases: [ssl_mode]
  db_ca_cert:
    description:
      - File of the certificate authorities the server's certificate must chain to, for
        O(db_sslmode=verify-ca) and O(db_sslmode=verify-full) (libpq C(sslrootcert)), for
        example V(/etc/ssl/certs/arvados-db-ca.pem). It is read on the host the module
        runs on.
      - Unset everywhere, libpq's default applies (E(PGSSLROOTCERT), then
        C(~/.postgresql/root.crt)).
    type: path
    aliases: [ca_cert, ssl_rootcert]
  db_connect_timeout:
    description:
      - Seconds to wait for each attempt to connect, at least 1 and at most V(86400) (a
        day).
    type: int
    default: 10
"""
