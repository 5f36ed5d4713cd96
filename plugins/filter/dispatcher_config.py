# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the dispatcher_config role: thin adapters over module_utils/_dispatcher/config.py.

They run on the controller, where ruamel.yaml edits config.yml without losing the
operator's comments and order; the role's tasks only read and write the files.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._dispatcher import config as settings_of


def _release(version):
    try:
        return settings_of.known_release(version)
    except ConfigError as error:
        raise AnsibleFilterError(str(error)) from None


def dispatcher_release(version):
    """{'version': '3.2.0', 'format': 'cluster'} of a release such as '3.2' or a package's '3.2.0-1'."""
    release = _release(version)
    return {"version": settings_of.release_text(release), "format": settings_of.release_format(release)}


def dispatcher_private_mode(mode):
    """'0644' -> '0640': the file's mode without any access for other users."""
    try:
        return settings_of.private_mode(mode)
    except ConfigError as error:
        raise AnsibleFilterError(str(error)) from None


# The two filters below return {'error': None or the reason} rather than raise: the tasks
# that call them are no_log (the results hold tokens), which would hide the reason too.


def dispatcher_legacy_document(settings, version, extra_settings=None):
    """{'document': the 1.x dispatcher's own file, with only the keys that release reads}."""
    try:
        document = settings_of.legacy_document(
            _release(version), settings_of.plain(settings), settings_of.plain(extra_settings or {})
        )
    except ConfigError as error:
        return {"error": str(error), "document": None}
    return {"error": None, "document": document}


def dispatcher_cluster_plan(text, settings, version, cluster_id="", extra_settings=None):
    """config.yml's new text with the dispatcher's keys set, and those keys before and after
    (secrets hidden) for the diff."""
    release = _release(version)
    try:
        wanted = settings_of.cluster_settings(
            release, settings_of.plain(settings), settings_of.plain(extra_settings or {})
        )
        new_text, cluster_id, before, after, warnings = settings_of.merge_cluster_text(
            None if text is None else str(text), str(cluster_id or ""), release, wanted
        )
    except ConfigError as error:
        return {"error": str(error), "text": None, "changed": False, "warnings": []}
    return {
        "error": None,
        "text": new_text,
        "cluster_id": cluster_id,
        "changed": new_text != text,
        "before": before,
        "after": after,
        "warnings": warnings,
    }


class FilterModule:
    def filters(self):
        return {
            "dispatcher_release": dispatcher_release,
            "dispatcher_legacy_document": dispatcher_legacy_document,
            "dispatcher_cluster_plan": dispatcher_cluster_plan,
            "dispatcher_private_mode": dispatcher_private_mode,
        }
