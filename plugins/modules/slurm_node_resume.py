#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_node_resume
short_description: Return to service the Slurm nodes taken down by an unexpected reboot, and no others
version_added: 1.0.0
description:
  - When a compute node comes back from a reboot Slurm did not order, C(slurmctld) sets it
    C(DOWN) with the reason C(Node unexpectedly rebooted) (unless C(ReturnToService=2)), and
    it stays out of service until someone resumes it. This module resumes such nodes
    (C(scontrol update NodeName=<name> State=RESUME), one per node) - only those.
  - A node is resumed only when, read by this module itself with one
    C(scontrol --all show node) just before, it is down or drained, its reason is exactly
    Slurm's C(Node unexpectedly rebooted), and its slurmd answers - Slurm has not flagged it
    C(NOT_RESPONDING) (slurmctld asks every node, down ones too, every C(SlurmdTimeout)/3 and
    sets that flag when slurmd does not answer), nor is it powered down, powering up or down,
    waiting for a reboot, in maintenance or failing.
  - A node drained or taken down for any other reason - an administrator's - is never
    resumed; it is listed in RV(refused) with why. A node already in service is listed in
    RV(in_service) and changes nothing, so a second run changes nothing.
author:
  - Arvados Ops recovery maintainers (@arvados-ops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: One C(scontrol show node) and no C(scontrol update); RV(resumed) names the nodes
      a real run would resume and C(changed) is true exactly when there is one.
  diff_mode:
    support: full
    details: A line per requested node (C(NAME STATE REASON)) before and after; in check mode
      the after side says C(RESUME) for the nodes that would be resumed.
  platform:
    support: full
    platforms: posix
requirements:
  - the Slurm client C(scontrol) on the host, run by a user Slurm lets update nodes (root or
    C(SlurmUser))
options:
  name:
    description:
      - The nodes that may be resumed, one host name each (no hostlist expression such as
        C(c[1-4])), for example the names
        M(arvados_ops.recovery.arvados_reconcile_info) reports in C(slurm_nodes).
      - Each is resumed only if it passes the checks above, whatever the caller read before.
    type: list
    elements: str
    aliases: [nodes]
    required: true
  clusters:
    description:
      - The one Slurm cluster to talk to (C(scontrol --clusters)); unset, the local one.
    type: str
  scontrol_path:
    description:
      - The C(scontrol) to run; unset, found in C(PATH) and the sbin directories. The
        environment's C(SCONTROL_*) variables (which change the nodes shown) are dropped and
        C(LC_ALL=C) set.
    type: path
  command_timeout:
    description:
      - Seconds one C(scontrol) may take before it is killed and the module fails.
      - At most V(86400) (a day).
    type: float
    default: 10
notes:
  - The playbook C(recover_after_node_reboot.yml) runs it with C(-e recover_resume_nodes=true)
    on the nodes its reconciliation found down for Slurm's unexpected-reboot reason.
seealso:
  - module: arvados_ops.recovery.arvados_reconcile_info
  - name: Slurm's scontrol update State=RESUME
    description: The one change this module makes.
    link: https://slurm.schedmd.com/scontrol.html
"""

EXAMPLES = r"""
- name: Find the nodes Slurm took down
  arvados_ops.recovery.arvados_reconcile_info:
    orphans: never
  register: reconcile

- name: Resume those that rebooted unexpectedly and whose slurmd answers
  arvados_ops.recovery.slurm_node_resume:
    name: "{{ reconcile.slurm_nodes | selectattr('reason_is_unexpected_reboot') | map(attribute='name') | list }}"
  when: reconcile.slurm_nodes | selectattr('reason_is_unexpected_reboot') | list | length > 0
  register: resumed

- name: Say which were left alone, and why
  ansible.builtin.debug:
    msg: "{{ resumed.refused | map(attribute='why') | list }}"
  when: resumed is not skipped
"""

RETURN = r"""
resumed:
  description: The nodes resumed (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [compute1]
refused:
  description: The requested nodes left alone - down or drained for another reason, with a
    slurmd that does not answer, or unknown to Slurm - and why.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: The node, type: str, returned: always, sample: compute2}
    slurm_state: {description: State= as scontrol showed it; null for an unknown node, type: str,
                  returned: always, sample: IDLE+DRAIN}
    reason: {description: Slurm's reason for the node, type: str, returned: always, sample: bad DIMM}
    why: {description: Why it was not resumed, type: str, returned: always,
          sample: "its reason is not Slurm's 'Node unexpectedly rebooted' but 'bad DIMM': an administrator's, left alone"}
  sample: []
in_service:
  description: The requested nodes already in service (neither down nor drained).
  returned: always
  type: list
  elements: str
  sample: []
errors:
  description: The nodes whose C(scontrol update) failed, with Slurm's error; the task then fails.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "compute1", "error": "scontrol update NodeName=compute1 failed (exit 1): ..."}]
nodes:
  description: The requested nodes as Slurm shows them after the run (in check mode, before),
    shaped as M(arvados_ops.recovery.arvados_reconcile_info)'s C(slurm_nodes) entries
    (C(state) null for a node in service).
  returned: always
  type: dict
  sample: {"compute1": {"name": "compute1", "state": null, "reason": null, "reason_is_unexpected_reboot": false,
                        "slurm_state": "IDLE", "slurmd_responding": true, "reason_set_by": null, "reason_set_at": null}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import argument_spec
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules.support import run_slurm_module
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.node_resume import (
    NODE_RESUME_OPTIONS,
    run_slurm_node_resume,
)


def main():
    module = AnsibleModule(argument_spec=argument_spec(NODE_RESUME_OPTIONS), supports_check_mode=True)
    run_slurm_module(module, run_slurm_node_resume, NODE_RESUME_OPTIONS)


if __name__ == "__main__":
    main()
