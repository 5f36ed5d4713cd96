# -*- coding: utf-8 -*-
"""Writes what a playbook run did, per task and host, to the JSON file named by
CLUSTER_RECORD_FILE: the scenario compares a --check run with the real run after it
from these records, not from the screen output. Enabled only where the scenario runs
a playbook (ANSIBLE_CALLBACKS_ENABLED=record_results).
"""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: record_results
type: aggregate
short_description: record each task's result per host as JSON
description:
  - "Writes each task's status, changed flag and chosen result keys per host, the
    changed tasks as sorted C(host | task) lines, and the run's stats per host, to the JSON file named by the environment variable
    CLUSTER_RECORD_FILE at the end of the run."
  - C(result) keeps only the keys named in RECORDED_KEYS; results with no_log keep none.
requirements:
  - enabled in ANSIBLE_CALLBACKS_ENABLED
"""

# The module results the scenario compares; everything else (diffs, stdout) stays out.
RECORDED_KEYS = (
    "failed_jobs",
    "requeued_jobs",
    "revoked_tokens",
    "skipped_jobs",
    "threshold",
    "cancelled",
    "already_absent",
    "msg",
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.tasks = []

    def _record(self, result, status):
        raw = result._result
        kept = {} if raw.get("_ansible_no_log") else {key: raw[key] for key in RECORDED_KEYS if key in raw}
        self.tasks.append(
            {
                "task": result._task.get_name(),
                "host": result._host.get_name(),
                "status": status,
                "changed": bool(raw.get("changed")),
                "result": kept,
            }
        )

    def v2_runner_on_ok(self, result, **kwargs):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False, **kwargs):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result, **kwargs):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result, **kwargs):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("CLUSTER_RECORD_FILE")
        if not path:
            return
        hosts = sorted(stats.processed.keys())
        record = {
            "tasks": self.tasks,
            "changed_tasks": sorted(
                {"%s | %s" % (task["host"], task["task"]) for task in self.tasks if task["changed"]}
            ),
            "stats": {host: stats.summarize(host) for host in hosts},
        }
        with open(path, "w", encoding="utf-8") as stream:
            json.dump(record, stream, indent=1, sort_keys=True)
