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
    of the cluster's prefix. crunch-dispatch-slurm's C(checkSqueueForOrphans) matches the
    container pattern (C(services/crunch-dispatch-slurm/crunch-dispatch-slurm.go), 1.4.3 to
    3.2.1), and the cluster's prefix only from Arvados 2.1.2 and 2.2.0 on (2.0.0 to 2.1.1
    took any cluster's). Other Slurm jobs are never reported.
  - I(Stray Slurm jobs) (RV(stray_slurm_jobs)) are the cluster's Slurm jobs, in the second
    listing, whose job is neither C(Running) nor C(Queued), or whose container is C(Queued),
    C(Complete) or C(Cancelled) or has priority 0 - the ones crunch-dispatch-slurm cancels
    (its tracker closes on C(Queued), C(Cancelled) and C(Complete),
    C(sdk/go/dispatch/dispatch.go), and C(runContainer) then cancels the Slurm job, 2.7.4 and
    3.2.1). One whose container became final while no dispatcher watched is only reaped
    when a dispatcher starts. Slurm jobs already C(COMPLETING) are ending and only counted
    (RV(ending_slurm_jobs)).
  - A Slurm job named after a UUID of the cluster that the database lacks is not stray by
    default - Arvados leaves it alone (the tracker's GET fails), and read from a lagging
    replica or the wrong database it is live work. It is listed in
    RV(missing_from_database), and in RV(stray_slurm_jobs) too only with
    O(missing_are_stray=true).
  - I(Orphaned) jobs (RV(orphaned_jobs)) and containers (RV(orphaned_containers)) are live
    records (jobs C(Running); containers C(Locked) or C(Running)) with no Slurm job of their
    name in two listings at least O(settle) seconds apart, and whose row was not updated at
    all (the same PostgreSQL row version, C(xmin)) when read again while the second listing
    is taken. A Slurm job submitted between the two listings is in the second one, so its
    job or container is never reported; nor is a record that anything updated meanwhile
    (its state, a restart, its lock, or the progress a live process writes), nor one whose
    C(modified_at) is within O(orphan_grace) seconds before the first read (the database's
    clock), as crunch-dispatch.rb's C(check_orphaned_slurm_jobs) spares jobs modified in the
    last 60 s (C(services/api/lib/crunch_dispatch.rb), 1.4.3).
  - A crunch v1 job C(Running) without a Slurm job is orphaned only when crunch-dispatch.rb
    is known to be stopped (O(crunch_v1_dispatcher=stopped)). When crunch-job exits 93 (its
    nodes failed), crunch-dispatch.rb keeps the job C(Running), with no Slurm job and its
    row untouched, until idle nodes return, and then runs it again ("Only this
    crunch-dispatch process can retry the job", C(reap_children), 1.4.3). With
    O(crunch_v1_dispatcher=running) or V(unknown) (the default) such jobs are listed in
    RV(jobs_awaiting_retry) instead of RV(orphaned_jobs).
  - Absence from Slurm means orphaned only where the work runs under this Slurm. With
    O(orphans=evidence) (the default) orphans of a kind are reported only when at least one
    live record of that kind does have its Slurm job in a listing; otherwise none are, and
    RV(orphans_withheld) says why. So a cluster whose crunch v1 jobs never ran under Slurm,
    or a C(squeue) that sees another Slurm cluster, does not have every live record called
    orphaned. After the only compute node rebooted, nothing is left in Slurm to show it;
    then set O(orphans=always).
  - Who holds the dispatchers' lock (RV(dispatcher)) - since Arvados 2.5.0 crunch-dispatch-slurm,
    arvados-dispatch-cloud and arvados-dispatch-lsf take the PostgreSQL advisory lock
    C(Dispatch), key 10005 (C(lib/controller/dblock/dblock.go)); it is looked up in
    C(pg_locks) without taking it. A held lock means a dispatcher runs; no holder does not
    mean none runs - they take it once at start and never check it again
    (C(crunch-dispatch-slurm.go), C(lib/dispatchcloud/dispatcher.go), C(lib/lsf/dispatch.go),
    2.7.4 and 3.2.1), so after a PostgreSQL restart a running dispatcher holds none, and
    older dispatchers never take it. Ask the dispatcher host's service manager too.
  - A standby server (C(pg_is_in_recovery())) is refused unless O(allow_standby=true), since its
    rows may lag the primary's.
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
  - psycopg 3 (C(python3-psycopg) on Debian 12+ and Ubuntu 24.04) or, where the release has only that,
    psycopg2 2.8.6 or later (C(python3-psycopg2) on Debian 11 and Ubuntu 22.04) on the host the
    module runs on; psycopg 3 is taken when both are there (its pipeline
    mode and chunked streams make the reads faster)
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
      - At most V(86400) (a day), else the option is refused before anything is done.
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
      - Other users' Slurm jobs that would be stray are listed in RV(skipped_other_user).
      - Unset (and no O(slurm_users)), every user's.
    type: str
  slurm_users:
    description:
      - "Per kind (V(jobs), V(containers)), the Slurm user whose jobs of that kind may be
        stray, for example V({jobs: crunch, containers: root}) - crunch-dispatch.rb runs
        C(salloc) as C(CrunchJobUser) (C(sudo -u), default V(crunch), 1.4.3) and
        crunch-dispatch-slurm runs C(sbatch) as its own user (root, as its unit ships, 1.4.3
        to 3.2.1). A kind left out: every user's."
      - Other users' Slurm jobs that would be stray are listed in RV(skipped_other_user).
        Not with O(slurm_user).
    type: dict
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
      - At most V(86400) (a day), else the option is refused before anything is done.
    type: float
    default: 10
  db_wait:
    description:
      - Seconds to keep trying a database that refuses connections or does not answer. A
        wrong password or a missing database fails at once.
      - At most V(86400) (a day), else the option is refused before anything is done.
    type: float
    default: 30
  query_timeout:
    description:
      - Seconds one SQL statement may take (PostgreSQL C(statement_timeout)).
      - At most V(2147483), else the option is refused before anything is done (PostgreSQL's
        C(statement_timeout) is a whole number of milliseconds that fits in 32 bits).
    type: float
    default: 300
  batch_size:
    description:
      - UUIDs per set-based statement.
      - At most V(100000), else the option is refused before anything is done.
    type: int
    default: 10000
  crunch_v1_dispatcher:
    description:
      - What the caller knows of crunch-dispatch.rb, the crunch v1 dispatcher (its runit
        service or process on the host that ran it).
      - V(running) - it runs, and may retry a job C(Running) without a Slurm job (after a
        node failure it keeps such jobs until idle nodes return); such jobs are listed in
        RV(jobs_awaiting_retry), never in RV(orphaned_jobs).
      - V(unknown) - no evidence either way; the same as V(running).
      - V(stopped) - it does not run; such jobs are orphaned (RV(orphaned_jobs)).
    type: str
    choices: [running, stopped, unknown]
    default: unknown
  orphan_grace:
    description:
      - Seconds. A job or container whose C(modified_at) is within this long before the
        first read (the database's clock, in UTC) is never orphaned; RV(evidence) counts
        them (C(recently_modified)). crunch-dispatch.rb spares jobs modified in the last 60 s.
      - At most V(3600), else the option is refused before anything is done.
    type: float
    default: 60
  missing_are_stray:
    description:
      - Also report as stray (RV(stray_slurm_jobs)) the Slurm jobs named after a UUID of the
        cluster that the database lacks (RV(missing_from_database)). Arvados never cancels
        them; set it only when this database is the cluster's primary and up to date.
    type: bool
    default: false
  allow_standby:
    description:
      - Read a standby server (C(pg_is_in_recovery()) true) instead of failing. Its rows may
        lag the primary's, so live work may look missing or orphaned.
    type: bool
    default: false
notes:
  - The module runs where C(squeue) and the database are both reachable; the playbook
    C(recover_after_node_reboot.yml) runs it on the first C(slurm_controllers) host.
  - Orphans are not changed here. Crunch v1 jobs are failed with
    M(arvados_ops.recovery.arvados_fail_jobs) (O(arvados_ops.recovery.arvados_fail_jobs#module:uuids)).
    Containers are changed only through the API (their side effects live in the API
    server) - start the dispatcher. At its start crunch-dispatch-slurm I(submits) each
    C(Locked) container of its own that has no Slurm job (it does not unlock it), and
    watches the others; while it runs, a container whose Slurm job leaves the queue is
    cancelled when C(Running), unlocked when C(Locked) (C(runContainer),
    C(services/crunch-dispatch-slurm/crunch-dispatch-slurm.go), 1.4.3 to 3.2.1).
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

- name: Crunch v1 jobs only, crunch-dispatch.rb known to be stopped (its jobs can be orphaned)
  arvados_ops.recovery.arvados_reconcile_info:
    crunch_v1_dispatcher: stopped
    kinds: [jobs]
  register: reconcile

- name: Fail the orphaned crunch v1 jobs and revoke their tokens
  arvados_ops.recovery.arvados_fail_jobs:
    uuids: "{{ reconcile.orphaned_jobs | map(attribute='uuid') | list }}"
    cancel_slurm_jobs: false
  when: reconcile.orphaned_jobs | length > 0

- name: Say that no session holds the dispatchers' lock (ask the service manager too)
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
missing_from_database:
  description: The cluster's Slurm jobs named after a UUID the database lacks, one entry per
    Slurm job, shaped as RV(stray_slurm_jobs)' entries (C(record_state) and C(priority) null).
    Arvados leaves them alone; they are in RV(stray_slurm_jobs) too only with O(missing_are_stray=true).
  returned: success
  type: list
  elements: dict
  sample: [{"job_id": "4243", "name": "zzzzz-dz642-0123456789abcdf", "state": "RUNNING", "nodes": "compute1",
            "user": "crunch", "kind": "container", "record_state": null, "priority": null,
            "reason": "no container of this UUID in the database: ..."}]
skipped_other_user:
  description: Slurm jobs that would be stray but belong to another Slurm user than the one
    O(slurm_user) or O(slurm_users) names for their kind; shaped as RV(stray_slurm_jobs)'
    entries and left alone. Always empty when every user's jobs may be stray.
  returned: success
  type: list
  elements: dict
  sample: [{"job_id": "4250", "name": "zzzzz-dz642-0123456789abcde", "state": "PENDING", "nodes": "",
            "user": "alice", "kind": "container", "record_state": "Complete", "priority": 0,
            "reason": "container is Complete: ..."}]
orphaned_jobs:
  description: Crunch v1 jobs Running without a Slurm job, with O(crunch_v1_dispatcher=stopped)
    only (empty when withheld, see RV(orphans_withheld)).
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
jobs_awaiting_retry:
  description: Crunch v1 jobs that would be orphaned but that crunch-dispatch.rb may still
    retry (O(crunch_v1_dispatcher=running) or V(unknown)), shaped as RV(orphaned_jobs)'
    entries; C(reason) names the evidence. Empty when withheld, see RV(orphans_withheld).
  returned: success
  type: list
  elements: dict
  sample: [{"uuid": "zzzzz-8i9sb-0123456789abcde", "state": "Running", "started_at": "2026-11-30T10:00:00.12",
            "is_locked_by_uuid": "zzzzz-tpzed-0123456789abcde",
            "reason": "job is Running without a Slurm job ..., but crunch-dispatch.rb runs and may retry it: ..."}]
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
    (C(with_slurm_job)), how many had none in either (C(without_slurm_job), before the
    re-read), and how many had none in the first but were spared as modified within
    O(orphan_grace) (C(recently_modified)).
  returned: success
  type: dict
  sample: {"jobs": {"live": 12, "with_slurm_job": 9, "without_slurm_job": 2, "recently_modified": 1}}
ending_slurm_jobs:
  description: Stray Slurm jobs left out because Slurm is already ending them (COMPLETING).
  returned: success
  type: int
  sample: 0
dispatcher:
  description: Whether a session holds the Dispatch advisory lock of Arvados 2.5 and later
    dispatchers. No holder does not prove that no dispatcher runs (see C(reason)).
  returned: success
  type: dict
  contains:
    lock_key: {description: The advisory lock key, type: int, returned: always, sample: 10005}
    lock_held: {description: True when a session holds it, type: bool, returned: always, sample: true}
    holders: {description: "The holding sessions: pid, application_name, client_addr, backend_start", type: list,
              elements: dict, returned: always, sample: [{"pid": 4242, "application_name": "", "client_addr": "10.0.0.5/32",
                                                           "backend_start": "2026-11-30T10:00:00+00:00"}]}
    reason: {description: What that means, type: str, returned: always, sample: "a session holds the Dispatch advisory lock ..."}
  sample: {"lock_key": 10005, "lock_held": false, "holders": [],
           "reason": "no session holds the Dispatch advisory lock (10005), which alone cannot tell ..."}
slurm:
  description: C(squeue_calls) (always 2), the cluster's Slurm jobs in each listing, and
    Slurm jobs named after other clusters' UUIDs.
  returned: success
  type: dict
  sample: {"squeue_calls": 2, "first_listing": 5, "second_listing": 5, "other_clusters_jobs": 0}
counts:
  description: The length of each list above.
  returned: success
  type: dict
  sample: {"stray_slurm_jobs": 1, "missing_from_database": 0, "orphaned_jobs": 2, "jobs_awaiting_retry": 0,
           "orphaned_containers": 0, "skipped_other_user": 0}
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
orphan_grace:
  description: The O(orphan_grace) used.
  returned: success
  type: float
  sample: 60.0
crunch_v1_dispatcher:
  description: The O(crunch_v1_dispatcher) used.
  returned: success
  type: str
  sample: unknown
missing_are_stray:
  description: The O(missing_are_stray) used.
  returned: success
  type: bool
  sample: false
database_is_standby:
  description: Whether the server read was a standby (only ever true with O(allow_standby=true)).
  returned: success
  type: bool
  sample: false
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
