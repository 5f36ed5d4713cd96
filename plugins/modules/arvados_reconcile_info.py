#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: arvados_reconcile_info
short_description: Compare Slurm's queue with Arvados' database, for crunch v1 jobs and containers
version_added: 0.1.0
description:
  - Reads Slurm's queue and Arvados' PostgreSQL database and reports where they disagree,
    after a compute node, the dispatcher's host or the API server rebooted. It changes
    nothing; M(arvados_ops.recovery.slurm_job_cancel) and
    M(arvados_ops.recovery.arvados_fail_jobs) act on what it reports (the playbook
    C(recover_after_node_reboot.yml) does both).
  - A Slurm job belongs to the cluster when its name is exactly a crunch v1 job UUID
    (C(^<prefix>-8i9sb-[0-9a-z]{15}$)) or a container UUID (C(^<prefix>-dz642-[0-9a-z]{15}$))
    of the cluster's prefix, as crunch-dispatch-slurm's C(checkSqueueForOrphans) matches
    them (C(services/crunch-dispatch-slurm/crunch-dispatch-slurm.go), Arvados 2.0.0 to 3.2.1).
    Other Slurm jobs are never reported.
  - I(Stray Slurm jobs) (RV(stray_slurm_jobs)) are the cluster's Slurm jobs, in the second
    listing, whose job is neither C(Running) nor C(Queued), whose container is C(Complete) or
    C(Cancelled) or has priority 0, or whose UUID is not in the database. crunch-dispatch-slurm
    cancels such container jobs while it runs, but one whose container became final while no
    dispatcher watched is only reaped when a dispatcher starts. Slurm jobs already
    C(COMPLETING) are ending and only counted (RV(ending_slurm_jobs)).
  - I(Orphaned) jobs (RV(orphaned_jobs)) and containers (RV(orphaned_containers)) are live
    records (jobs C(Running); containers C(Locked) or C(Running)) with no Slurm job of their
    name in two listings at least O(settle) seconds apart, and whose row was not updated at
    all (the same PostgreSQL row version, C(xmin)) when read again while the second listing
    is taken. A Slurm job submitted between the two listings is in the second one, so its
    job or container is never reported; nor is a record that anything updated meanwhile
    (its state, a restart, its lock, or the progress a live process writes).
  - Absence from Slurm means orphaned only where the work runs under this Slurm. With
    O(orphans=evidence) (the default) orphans of a kind are reported only when at least one
    live record of that kind does have its Slurm job in a listing; otherwise none are, and
    RV(orphans_withheld) says why. So a cluster whose crunch v1 jobs never ran under Slurm,
    or a C(squeue) that sees another Slurm cluster, does not have every live record called
    orphaned. After the only compute node rebooted, nothing is left in Slurm to show it;
    then set O(orphans=always).
  - Whether a dispatcher is alive (RV(dispatcher)) - since Arvados 2.5.0 crunch-dispatch-slurm,
    arvados-dispatch-cloud and arvados-dispatch-lsf hold the PostgreSQL advisory lock
    C(Dispatch), key 10005 (C(lib/controller/dblock/dblock.go)); it is looked up in
    C(pg_locks) without taking it. Older dispatchers take no lock - ask their service manager.
  - Cost, whatever the size of the tables, two C(squeue) calls and per kind one scan of the
    live records (while the first C(squeue) runs), one set-based re-read of the candidates
    (while the second C(squeue) runs; by UUID, or, when they are most of the live records, by
    a scan of the live records without C(finished_at), an index scan on C(jobs.finished_at),
    plus by UUID the rare live records whose C(finished_at) is set) and one of the names in
    the second listing (C(uuid = ANY), O(batch_size) UUIDs per statement); never a statement
    per UUID. Memory follows the live records and the Slurm queue, not the tables. The session
    is read-only.
author:
  - Arvados Ops recovery maintainers (@arvados-ops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - arvados_ops.recovery.arvados_db
attributes:
  check_mode:
    support: full
    details: The module never changes anything; check mode runs the same reads.
  diff_mode:
    support: none
    details: Nothing changes, so there is nothing to show.
  platform:
    details: Runs where both C(squeue) reaches the Slurm cluster and Python reaches the
      database, such as the crunch-dispatch-slurm host.
    support: full
    platforms: posix
requirements:
  - psycopg 3 (C(python3-psycopg) on Debian and Ubuntu) on the host the module runs on
  - PyYAML when the database settings come from a file
  - the Slurm client C(squeue) on that host
options:
  cluster_prefix:
    description:
      - The cluster's five-character UUID prefix, for example V(zzzzz). Slurm jobs named
        after other clusters' UUIDs are counted (C(other_clusters_jobs) in RV(slurm)), never
        reported.
      - Unset, the prefix of the database's one system user
        (C(<prefix>-tpzed-000000000000000)); a database with several (a federation) or none
        needs it set.
    type: str
  kinds:
    description:
      - What to reconcile - V(jobs) (crunch v1, up to Arvados 1.4), V(containers) (Arvados
        1.0 and later), or both.
    type: list
    elements: str
    choices: [jobs, containers]
    default: [jobs, containers]
  settle:
    description:
      - Seconds between the start of the first and of the second C(squeue) listing. A
        dispatcher submits a Slurm job shortly after a record becomes live; longer than that,
        and longer than a few C(squeue) poll periods of the dispatcher (10 s by default).
    type: float
    default: 10
  orphans:
    description:
      - When absence from Slurm means orphaned.
      - V(evidence) - only for a kind with at least one live record whose Slurm job is in a
        listing (proof that this kind runs under this Slurm and that C(squeue) sees it).
      - V(always) - even when Slurm shows none of the cluster's work, as after the only
        compute node rebooted.
      - V(never) - never; only stray Slurm jobs and the dispatcher are reported.
    type: str
    choices: [evidence, always, never]
    default: evidence
  slurm_user:
    description:
      - Report as stray only Slurm jobs of this user (the dispatcher's, for example
        V(crunch)). A Slurm job of any user still counts as present for orphans.
    type: str
  slurm_clusters:
    description:
      - Slurm clusters to list (C(squeue --clusters)); unset, the local one.
    type: str
  squeue_path:
    description:
      - The C(squeue) to run; unset, found in C(PATH). The environment's C(SQUEUE_*)
        variables are dropped and C(LC_ALL=C) set.
    type: path
  command_timeout:
    description:
      - Seconds one C(squeue) may take before it is killed and the module fails. Slurm's
        clients give up on an unreachable controller after C(MessageTimeout).
    type: float
    default: 10
  db_wait:
    description:
      - Seconds to keep trying a database that refuses connections or does not answer. A
        wrong password or a missing database fails at once.
    type: float
    default: 30
  query_timeout:
    description:
      - Seconds one SQL statement may take (PostgreSQL C(statement_timeout)).
    type: float
    default: 300
  batch_size:
    description:
      - UUIDs per set-based statement.
    type: int
    default: 10000
notes:
  - The module runs where C(squeue) and the database are both reachable; the playbook
    C(recover_after_node_reboot.yml) runs it on the first C(slurm_controllers) host.
  - Orphans are not changed here. Crunch v1 jobs are failed with
    M(arvados_ops.recovery.arvados_fail_jobs) (O(arvados_ops.recovery.arvados_fail_jobs#module:uuids)).
    Containers are changed only through the API (their side effects live in the API
    server) - a running crunch-dispatch-slurm cancels a C(Running) container whose Slurm job
    is gone and unlocks a C(Locked) one, so start the dispatcher.
seealso:
  - module: arvados_ops.recovery.arvados_fail_jobs
  - module: arvados_ops.recovery.slurm_job_cancel
"""

EXAMPLES = r"""
- name: Compare Slurm's queue with the database (on the dispatcher host)
  arvados_ops.recovery.arvados_reconcile_info:
    config_file: /etc/arvados/config.yml
  environment:
    SLURM_CONF: /etc/slurm/slurm.conf
  register: reconcile

- name: After the only compute node rebooted, Slurm shows no work at all
  arvados_ops.recovery.arvados_reconcile_info:
    orphans: always
    kinds: [jobs]
    settle: 20
  register: reconcile

- name: Stop the stray Slurm jobs
  arvados_ops.recovery.slurm_job_cancel:
    name: "{{ reconcile.stray_slurm_jobs | map(attribute='name') | unique | list }}"
  when: reconcile.stray_slurm_jobs | length > 0

- name: Fail the orphaned crunch v1 jobs and revoke their tokens
  arvados_ops.recovery.arvados_fail_jobs:
    uuids: "{{ reconcile.orphaned_jobs | map(attribute='uuid') | list }}"
    cancel_slurm_jobs: false
  when: reconcile.orphaned_jobs | length > 0

- name: Say when no dispatcher runs
  ansible.builtin.debug:
    msg: "{{ reconcile.dispatcher.reason }}"
  when: not reconcile.dispatcher.lock_held
"""

RETURN = r"""
changed:
  description: Always false - nothing is ever changed.
  returned: always
  type: bool
  sample: false
cluster_prefix:
  description: The prefix whose UUIDs were reconciled.
  returned: success
  type: str
  sample: zzzzz
cluster_prefix_source:
  description: Where the prefix came from.
  returned: success
  type: str
  sample: "the database's system user zzzzz-tpzed-000000000000000"
stray_slurm_jobs:
  description: The cluster's Slurm jobs that should not be queued, one entry per Slurm job.
  returned: success
  type: list
  elements: dict
  contains:
    job_id: {description: Slurm job id, type: str, returned: always, sample: "4242"}
    name: {description: Slurm job name (the UUID), type: str, returned: always, sample: zzzzz-dz642-0123456789abcde}
    state: {description: Slurm state, type: str, returned: always, sample: RUNNING}
    nodes: {description: Slurm node list (empty while pending), type: str, returned: always, sample: "compute[1-2]"}
    user: {description: Slurm user, type: str, returned: always, sample: crunch}
    kind: {description: job or container, type: str, returned: always, sample: container}
    record_state: {description: "The record's state; null when not in the database", type: str, returned: always, sample: Cancelled}
    priority: {description: The container's priority (null for jobs), type: int, returned: always, sample: 0}
    reason: {description: Why it is stray, type: str, returned: always,
             sample: "container is Cancelled: crunch-dispatch-slurm cancels the Slurm job of a final container"}
  sample: []
orphaned_jobs:
  description: Crunch v1 jobs Running without a Slurm job (empty when withheld, see RV(orphans_withheld)).
  returned: success
  type: list
  elements: dict
  contains:
    uuid: {description: Job UUID, type: str, returned: always, sample: zzzzz-8i9sb-0123456789abcde}
    state: {description: Always Running, type: str, returned: always, sample: Running}
    started_at: {description: 'ISO 8601, UTC without zone, as PostgreSQL writes it (no trailing zeros in the fraction); null when unset',
                 type: str, returned: always, sample: "2026-11-30T10:00:00.12"}
    is_locked_by_uuid: {description: The user whose token runs the job, type: str, returned: always, sample: zzzzz-tpzed-0123456789abcde}
    reason: {description: Why it is orphaned, type: str, returned: always, sample: "job is Running, but no Slurm job ..."}
  sample: []
orphaned_containers:
  description: Containers Locked or Running without a Slurm job (empty when withheld).
  returned: success
  type: list
  elements: dict
  contains:
    uuid: {description: Container UUID, type: str, returned: always, sample: zzzzz-dz642-0123456789abcde}
    state: {description: Locked or Running, type: str, returned: always, sample: Running}
    started_at: {description: 'ISO 8601, UTC without zone, as PostgreSQL writes it (no trailing zeros in the fraction); null when unset',
                 type: str, returned: always, sample: "2026-11-30T10:00:00.12"}
    locked_by_uuid: {description: The dispatcher's token UUID holding the lock, type: str, returned: always,
                     sample: zzzzz-gj3su-000000000000000}
    priority: {description: The container's priority, type: int, returned: always, sample: 1}
    reason: {description: Why it is orphaned, type: str, returned: always, sample: "container is Running, but no Slurm job ..."}
  sample: []
orphans_withheld:
  description: Per kind, why its orphans were not reported, or null when they were.
  returned: success
  type: dict
  sample: {"jobs": null, "containers": "Slurm shows no Slurm job for any of the 3 live containers: ..."}
orphans_rule:
  description: The value of O(orphans), and RV(orphans_rule_means) what it means.
  returned: success
  type: str
  sample: evidence
orphans_rule_means:
  description: The condition under which absence from Slurm meant orphaned in this run.
  returned: success
  type: str
  sample: "orphans of a kind are reported only when ..."
evidence:
  description: Per kind, live records (C(live)), how many had a Slurm job in a listing
    (C(with_slurm_job)) and how many had none in either (C(without_slurm_job), before the re-read).
  returned: success
  type: dict
  sample: {"jobs": {"live": 12, "with_slurm_job": 10, "without_slurm_job": 2}}
ending_slurm_jobs:
  description: Stray Slurm jobs left out because Slurm is already ending them (COMPLETING).
  returned: success
  type: int
  sample: 0
dispatcher:
  description: Whether a dispatcher of Arvados 2.5 or later holds the Dispatch advisory lock.
  returned: success
  type: dict
  contains:
    lock_key: {description: The advisory lock key, type: int, returned: always, sample: 10005}
    lock_held: {description: True when a session holds it, type: bool, returned: always, sample: true}
    holders: {description: "The holding sessions: pid, application_name, client_addr, backend_start", type: list,
              elements: dict, returned: always, sample: [{"pid": 4242, "application_name": "", "client_addr": "10.0.0.5/32",
                                                           "backend_start": "2026-11-30T10:00:00+00:00"}]}
    reason: {description: What that means, type: str, returned: always, sample: "a session holds the Dispatch advisory lock ..."}
  sample: {"lock_key": 10005, "lock_held": false, "holders": [], "reason": "no session holds ..."}
slurm:
  description: C(squeue_calls) (always 2), the cluster's Slurm jobs in each listing, and
    Slurm jobs named after other clusters' UUIDs.
  returned: success
  type: dict
  sample: {"squeue_calls": 2, "first_listing": 5, "second_listing": 5, "other_clusters_jobs": 0}
counts:
  description: Numbers of stray Slurm jobs, orphaned jobs and orphaned containers.
  returned: success
  type: dict
  sample: {"stray_slurm_jobs": 1, "orphaned_jobs": 2, "orphaned_containers": 0}
database_statements:
  description: SQL statements run (none per UUID).
  returned: success
  type: int
  sample: 6
seconds:
  description: Seconds spent in squeue and in the database (the wait of O(settle) excluded).
  returned: success
  type: dict
  sample: {"squeue": 0.02, "database": 0.3}
settle:
  description: The O(settle) used.
  returned: success
  type: float
  sample: 10.0
database:
  description: Where the connection settings came from (never the password).
  returned: success
  type: str
  sample: "config_file /etc/arvados/config.yml, cluster zzzzz"
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.arvados_ops.recovery.plugins.module_utils.module_support import argument_spec, run_engine
from ansible_collections.arvados_ops.recovery.plugins.module_utils.reconcile_run import (
    ALL_OPTIONS,
    run_reconcile,
)


def main():
    # As arvados_fail_jobs: the engine checks which database options exclude each other.
    module = AnsibleModule(argument_spec=argument_spec(ALL_OPTIONS), supports_check_mode=True)
    run_engine(module, run_reconcile, ALL_OPTIONS, missing_required_lib)


if __name__ == "__main__":
    main()
