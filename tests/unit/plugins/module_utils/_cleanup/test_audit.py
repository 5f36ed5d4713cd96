# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the cleanup writes `update` audit rows: the cluster's AuditLogs as Arvados'
is_audit_logging_enabled? reads them (1.4.3 services/api/app/models/arvados_model.rb:816-819),
or the option `audit_logs`."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.audit import (
    audit_logs_setting,
    duration_seconds,
    logging_enabled,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError

NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "cancel_slurm_jobs": False}


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("336h", 1209600.0),  # 1.4.3 lib/config/config.default.yml:166
        ("1209600", 1209600.0),  # an Integer is seconds (1.4.3 config_loader.rb coercion_and_check)
        ("0", 0.0),
        ("0s", 0.0),
        ("1h30m", 5400.0),
        ("0.5s", 0.5),
        ("500ms", 0.5),  # Go's time.ParseDuration, 2.x
        ("-2s", -2.0),
        ("1m0s", 60.0),
    ],
)
def test_durations_as_arvados_loaders_read_them(text, seconds):
    assert duration_seconds(text, "MaxAge") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 days", "h", "1x", "1h junk", "0.5"])
def test_a_duration_neither_loader_takes_is_refused(text):
    with pytest.raises(ConfigError, match="MaxAge is not a duration"):
        duration_seconds(text, "MaxAge")


@pytest.mark.parametrize(
    "max_age, batch, enabled",
    [
        ("336h", "0", True),  # the defaults
        ("0s", "0", True),  # MaxDeleteBatch 0: Arvados never deletes, so it keeps writing
        ("0s", "100000", False),
        ("0", "1", False),
        ("0.9s", "1", False),  # to_i truncates: 0
        ("-0.5s", "1", False),
        ("1s", "1", True),
        ("336h", "100000", True),
        ("0s", "-1", True),
    ],
)
def test_logging_is_off_only_when_max_age_is_0_and_max_delete_batch_above_0(max_age, batch, enabled):
    assert logging_enabled(max_age, batch, "AuditLogs") is enabled


def test_a_max_delete_batch_that_is_no_number_is_refused():
    with pytest.raises(ConfigError, match="AuditLogs.MaxDeleteBatch is not a whole number"):
        logging_enabled("0s", "lots", "AuditLogs")


def config(tmp_path, audit_logs=None, cluster="zzzzz"):
    lines = [
        "Clusters:",
        "  %s:" % cluster,
        "    PostgreSQL:",
        "      Connection:",
        "        dbname: arvados_test",
    ]
    if audit_logs is not None:
        lines.append("    AuditLogs:")
        lines.extend("      %s: %s" % item for item in audit_logs.items())
    path = tmp_path / "config.yml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_auto_follows_the_config_file_the_run_reads(tmp_path):
    path = config(tmp_path, {"MaxAge": "0s", "MaxDeleteBatch": "100000"})
    off = audit_logs_setting({"config_file": path})
    assert off.written is False
    assert off.source == "config_file %s, AuditLogs (MaxAge 0s, MaxDeleteBatch 100000)" % path
    kept = audit_logs_setting({"config_file": config(tmp_path, {"MaxAge": "0s", "MaxDeleteBatch": "0"})})
    assert kept.written is True


def test_a_key_the_file_does_not_set_has_arvados_default(tmp_path):
    only_age = audit_logs_setting({"config_file": config(tmp_path, {"MaxAge": "0s"})})
    assert only_age.written is True and "MaxDeleteBatch not set: 0" in only_age.source
    only_batch = audit_logs_setting({"config_file": config(tmp_path, {"MaxDeleteBatch": "5"})})
    assert only_batch.written is True and "MaxAge not set: 336h" in only_batch.source
    neither = audit_logs_setting({"config_file": config(tmp_path)})
    assert neither.written is True


def test_the_default_config_file_is_read_when_it_exists(tmp_path):
    path = config(tmp_path, {"MaxAge": "0", "MaxDeleteBatch": "10"})
    assert audit_logs_setting({}, default_config_file=path).written is False
    assert audit_logs_setting({}, default_config_file=str(tmp_path / "missing.yml")).written is True


@pytest.mark.parametrize("skip", [{"config_file": ""}, {"database_yml": "/etc/arvados/api/database.yml"}])
def test_without_a_config_file_audit_rows_are_written_as_arvados_default(tmp_path, skip):
    path = config(tmp_path, {"MaxAge": "0s", "MaxDeleteBatch": "1"})
    setting = audit_logs_setting(dict(skip), default_config_file=path)
    assert setting.written is True and setting.source.startswith("Arvados' default (no config.yml read")


@pytest.mark.parametrize("value, written", [(False, False), ("no", False), (True, True), ("yes", True)])
def test_the_option_says_it_explicitly_whatever_the_file_says(tmp_path, value, written):
    path = config(tmp_path, {"MaxAge": "0s", "MaxDeleteBatch": "1"} if written else None)
    setting = audit_logs_setting({"config_file": path, "audit_logs": value})
    assert setting == (written, "option audit_logs")


def test_a_bad_max_age_in_the_file_fails_before_anything_is_done(tmp_path):
    path = config(tmp_path, {"MaxAge": "two weeks", "MaxDeleteBatch": "1"})
    with pytest.raises(ConfigError, match="AuditLogs.MaxAge is not a duration"):
        cleanup_run.prepare({"config_file": path, "cancel_slurm_jobs": False})


def test_prepare_hands_the_setting_to_the_engine(tmp_path):
    path = config(tmp_path, {"MaxAge": "0s", "MaxDeleteBatch": "1"})
    plan = cleanup_run.prepare({"config_file": path, "cancel_slurm_jobs": False})
    assert plan.audit_logs.written is False and plan.options.audit_logs is False
    plan = cleanup_run.prepare(dict(NO_FILES, audit_logs="true"))
    assert plan.options.audit_logs is True
    with pytest.raises(ConfigError, match="audit_logs"):
        cleanup_run.prepare(dict(NO_FILES, audit_logs="sometimes"))
