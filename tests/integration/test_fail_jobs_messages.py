"""Issue 42 item 6: the command's messages say what is true on a host that is not the API
server's. README.md's `arvados-fail-jobs --before reboot --check` there said `no database
name: set db_name (settings from options)` for a missing /etc/arvados/config.yml, and a
failed connection with no user read "as None".
"""

from __future__ import annotations

import getpass
import os
import subprocess

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.settings import (
    DEFAULT_CONFIG_FILE,
    DEFAULT_DATABASE_YML,
)
from tests.integration import fail_jobs_helpers as h
from tests.integration.module_playbook import REPO_ROOT


def run(lab_env, *flags, drop=()):
    env = {k: v for k, v in lab_env.items() if k not in drop}
    return subprocess.run(
        h.CLI + list(flags), cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.skipif(
    os.path.exists(DEFAULT_CONFIG_FILE) or os.path.exists(DEFAULT_DATABASE_YML),
    reason="this host has Arvados' default settings files",
)
def test_readme_check_without_the_default_config_file_says_it_is_missing(lab_env):
    completed = run(lab_env, "--before", "reboot", "--check")
    assert completed.returncode == 1, completed
    assert completed.stderr == (
        "arvados-fail-jobs: no database settings: %s does not exist and %s does not exist, and no "
        "db_name is given; name the cluster's file with config_file (or database_yml on older "
        "clusters), or give db_name (and db_host, db_user... as needed)\n" % (DEFAULT_CONFIG_FILE, DEFAULT_DATABASE_YML)
    )


def test_a_failed_connection_without_a_user_names_the_one_libpq_took(lab_env, fresh_db):
    host, port = str(fresh_db.connection["host"]), str(fresh_db.connection["port"])
    flags = ["--db-host", host, "--db-port", port, "--db-name", "no_such_db", "--db-wait", "0", "--check"]
    from_env = run(lab_env, *flags)
    assert from_env.returncode == 1
    assert "as '%s' (no user given: libpq's PGUSER) on %s:%s" % (lab_env["PGUSER"], host, port) in from_env.stderr
    login = run(lab_env, *flags, drop=("PGUSER",))
    assert login.returncode == 1
    assert "as '%s' (no user given: libpq's default, the login name)" % getpass.getuser() in login.stderr
    assert "None" not in from_env.stderr + login.stderr
