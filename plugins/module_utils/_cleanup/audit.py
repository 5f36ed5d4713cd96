# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a cleanup writes `update` audit rows: the cluster's AuditLogs settings, read as
Arvados reads them, or the option `audit_logs`.

Arvados writes an audit row for a change only when `is_audit_logging_enabled?` says so:
not when AuditLogs.MaxAge is 0 seconds (`to_i`, so under one second) and
AuditLogs.MaxDeleteBatch is above 0 (1.4.3 services/api/app/models/arvados_model.rb:816-819,
the same up to 3.2.1:1048-1051). 1.3.x read the same pair from application.yml as
`max_audit_log_age` and `max_audit_log_delete_batch` (1.3.0 arvados_model.rb:789-792); 1.1.x
and 1.2.x always wrote them (1.1.0 arvados_model.rb:742-766 has no such test). The `dispatch`
row of fail_job is no audit row (1.4.3 services/api/lib/crunch_dispatch.rb:222-233 saves a
Log directly) and is always written.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, NamedTuple

from .._common.errors import ConfigError, shown
from .._common.options import auto_or_bool
from .._database.settings import DEFAULT_CONFIG_FILE, cluster_setting, config_file_read

# 1.4.3 lib/config/config.default.yml:166 and :176 (3.2.1: :539 and :549).
DEFAULT_MAX_AGE = "336h"
DEFAULT_MAX_DELETE_BATCH = "0"
MAX_AGE_KEY = ("AuditLogs", "MaxAge")
MAX_DELETE_BATCH_KEY = ("AuditLogs", "MaxDeleteBatch")

# A duration as either loader takes it: 1.4.3's ConfigLoader (services/api/lib/
# config_loader.rb: an Integer is seconds, text a sequence of <number>(s|m|h)) or, from 2.0,
# Go's time.ParseDuration (sdk/go/arvados/duration.go: ns, us, ms, s, m, h, a sign, "0").
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_INTEGER = re.compile(r"[-+]?\d+")


class AuditLogs(NamedTuple):
    """Whether the run writes `update` audit rows, and what said so."""

    written: bool
    source: str

    def to_dict(self) -> Dict[str, Any]:
        return {"written": self.written, "source": self.source}


def duration_seconds(text: str, where: str) -> float:
    """AuditLogs.MaxAge in seconds; a value neither loader takes is an error, as Arvados
    would not start with it."""
    text = text.strip()
    if _INTEGER.fullmatch(text):
        return float(int(text))
    sign, rest = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text[1:] if text[:1] == "+" else text)
    total, position = 0.0, 0
    while rest and position < len(rest):
        part = _DURATION_PART.match(rest, position)
        if part is None:
            break
        total += float(part.group(1)) * _UNIT_SECONDS[part.group(2)]
        position = part.end()
    if not rest or position != len(rest):
        raise ConfigError("%s is not a duration (a number of seconds, or like 336h, 5m, 0s): %s" % (where, shown(text)))
    return sign * total


def logging_enabled(max_age: str, max_delete_batch: str, where: str) -> bool:
    """is_audit_logging_enabled? (1.4.3 services/api/app/models/arvados_model.rb:816-819):
    `!(MaxAge.to_i == 0 && MaxDeleteBatch.to_i > 0)`; to_i truncates toward zero."""
    batch = max_delete_batch.strip()
    if not _INTEGER.fullmatch(batch):
        raise ConfigError("%s.MaxDeleteBatch is not a whole number: %s" % (where, shown(batch)))
    return not (int(duration_seconds(max_age, where + ".MaxAge")) == 0 and int(batch) > 0)


def audit_logs_setting(params: Mapping[str, Any], default_config_file: str = DEFAULT_CONFIG_FILE) -> AuditLogs:
    """`audit_logs` true or false when given; with auto, the AuditLogs of the config.yml
    the run reads (_database.settings.cluster_setting), its defaults for a key it does not
    set; with no config.yml read, Arvados' defaults: written."""
    mode = auto_or_bool("audit_logs", params.get("audit_logs", "auto"))
    if mode != "auto":
        return AuditLogs(bool(mode), "option audit_logs")
    path = config_file_read(params, default_config_file)
    if not path:
        return AuditLogs(
            True,
            "Arvados' default (no config.yml read; a cluster whose AuditLogs or, before 1.4, "
            "application.yml turn audit logs off needs audit_logs: false)",
        )
    max_age = cluster_setting(params, MAX_AGE_KEY, default_config_file)
    batch = cluster_setting(params, MAX_DELETE_BATCH_KEY, default_config_file)
    where = "config_file %s, AuditLogs" % shown(path)
    written = logging_enabled(
        max_age[0] if max_age else DEFAULT_MAX_AGE, batch[0] if batch else DEFAULT_MAX_DELETE_BATCH, where
    )
    return AuditLogs(
        written,
        "%s (MaxAge %s, MaxDeleteBatch %s)"
        % (
            where,
            shown(max_age[0]) if max_age else "not set: %s" % DEFAULT_MAX_AGE,
            shown(batch[0]) if batch else "not set: %s" % DEFAULT_MAX_DELETE_BATCH,
        ),
    )
