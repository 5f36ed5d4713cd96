# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The watch's gauges as a real Prometheus parser reads them, for the tests that check them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.version import COLLECTION_VERSION


def samples(text: str) -> dict:
    """{(name, sorted labels): value} as prometheus_client's parser reads the text."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def build_info_sample(python_version: str) -> tuple:
    """The key of the build_info sample a watch run by this Python writes."""
    return ("arvados_recovery_build_info", (("python_version", python_version), ("version", COLLECTION_VERSION)))
