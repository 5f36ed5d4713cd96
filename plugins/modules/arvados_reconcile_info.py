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
version_added: 1.0.0
description:
  - Reads Slurm's queue and Arvados' PostgreSQL database and reports where they disagree,
    after a compute node, the dispatcher's host or the API server rebooted. It changes
    nothing (its database session is read-only); M(arvados_ops.recovery.slurm_job_cancel)
    and M(arvados_ops.recovery.arvados_fail_jobs) act on what it reports, as the playbook
    C(recover_after_node_reboot.yml) does.
  - Only Slurm jobs named exactly after a crunch v1 job UUID (C(<prefix>-8i9sb-...)) or a
    container UUID (C(<prefix>-dz642-...)) of the cluster are looked at, as
    crunch-dispatch-slurm does; other Slurm jobs are never reported.
  - I(Stray Slurm jobs) (RV(stray_slurm_jobs)) are those whose job is neither C(Running) nor
    C(Queued), or whose container is C(Queued), C(Complete) or C(Cancelled) or has priority
    0 - the ones crunch-dispatch-slurm cancels. Slurm jobs already C(COMPLETING) are only
    counted (RV(ending_slurm_jobs)). The Slurm job of a crunch v1 job modified less than 60
    seconds before the read (the database's clock) is never stray, whatever the job's state
    - crunch-job is still saving its work, and crunch-dispatch.rb spares it
    (C(check_orphaned_slurm_jobs), 1.4.3); it is listed in RV(jobs_ending) with its age.
  - A Slurm job named after a UUID the database lacks is listed in
    RV(missing_from_database). By default one named after a crunch v1 job is stray too, as
    crunch-dispatch.rb cancels it (1.4.3), and one named after a container is left alone, as
    crunch-dispatch-slurm leaves it; O(missing_are_stray) decides for both kinds instead.
  - I(Orphaned) jobs and containers (RV(orphaned_jobs), RV(orphaned_containers)) are live
    records (jobs C(Running); containers C(Locked) or C(Running)) with no Slurm job in two
    listings O(settle) seconds apart and whose row nothing changed meanwhile; a C(Locked)
    container modified in the last O(orphan_grace) seconds is not one. A crunch v1 job is orphaned only when
    crunch-dispatch.rb is known to be stopped (O(crunch_v1_dispatcher)); otherwise it is
    listed in RV(jobs_awaiting_retry). By default orphans of a kind are reported only when
    Slurm shows some work of that kind (see O(orphans)).
  - It reports Slurm's nodes that are C(DOWN) or drained, with their reasons (RV(slurm_nodes)),
    from one C(scontrol --all show node) run beside the first listing. A node Slurm itself
    took down when it came back from a reboot it did not order has the reason
    C(Node unexpectedly rebooted) and stays down until returned to service
    (M(arvados_ops.recovery.slurm_node_resume)), unless C(ReturnToService=2).
  - Each orphaned C(Locked) container gets its lock diagnosed (C(lock) in
    RV(orphaned_containers)), in one statement for all of them - whether the token that
    locked it is the cluster's C(SystemRootToken) (C(<prefix>-gj3su-000000000000000), which
    has no row), gone, expired, or another live token; its C(lock_count) against
    C(Containers.MaxDispatchAttempts) (RV(max_dispatch_attempts)); and what would fix it.
    Only the locking token can unlock a container, and an unlock at the limit cancels it.
  - It also reports who holds the dispatchers' C(Dispatch) lock in PostgreSQL
    (RV(dispatcher)), without taking it. A held lock means a dispatcher runs; no holder
    does not mean none runs, so ask the dispatcher host's service manager too.
  - Its cost does not grow with the tables - two C(squeue) calls and a few set-based
    statements, never one per UUID; memory follows the live records and the Slurm queue. A
    standby server is refused unless O(allow_standby=true).
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
  - the Slurm clients C(squeue) and (with O(report_nodes)) C(scontrol) on that host
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
      - Seconds between the starts of the two C(squeue) listings. Longer than a dispatcher
        takes to submit a Slurm job for a new live record, and than a few of its C(squeue)
        polls (10 s by default); longer is safer and slower.
      - At most V(86400) (a day).
    type: float
    default: 10
  orphans:
    description:
      - When absence from Slurm means orphaned.
      - V(evidence) - only for a kind with at least one live record whose Slurm job is in a
        listing, proof that this kind runs under this Slurm and that C(squeue) sees it;
        otherwise none are reported and RV(orphans_withheld) says why.
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
        stray, for example V({jobs: crunch, containers: root}): crunch-dispatch.rb submits as
        its C(CrunchJobUser), crunch-dispatch-slurm as its own user. A kind left out: every
        user's."
      - Other users' Slurm jobs that would be stray are listed in RV(skipped_other_user).
        Not with O(slurm_user).
    type: dict
  slurm_clusters:
    description:
      - Slurm clusters to list (C(squeue --clusters)); unset, the local one.
    type: str
  squeue_path:
    description:
      - The C(squeue) to run; unset, found in C(PATH) and the sbin directories. The
        environment's C(SQUEUE_*) variables are dropped and C(LC_ALL=C) set.
    type: path
  report_nodes:
    description:
      - Read Slurm's nodes down or drained (RV(slurm_nodes)) with one C(scontrol --all show node).
        A failing C(scontrol) fails the module, as a failing C(squeue) does.
      - Not done when O(slurm_clusters) names several clusters, since C(scontrol) talks to
        one (C(scontrol_calls) in RV(slurm) is then 0).
    type: bool
    default: true
  scontrol_path:
    description:
      - The C(scontrol) to run for O(report_nodes); unset, found in C(PATH) and the sbin
        directories. The environment's C(SCONTROL_*) variables are dropped and C(LC_ALL=C)
        set. It gets O(slurm_clusters) as C(--clusters).
    type: path
  arvados_version:
    description:
      - The Arvados release the API server runs (V(2.7.4), V(3.2)), for the default of
        C(Containers.MaxDispatchAttempts) when the C(config.yml) the database settings come
        from does not set it - 5 up to 2.6, 10 from 2.7.0 (C(lib/config/config.default.yml)).
        Unset and not in C(config.yml), the limit is reported unknown (null).
      - It also says whether the dispatcher should hold the C(Dispatch) lock
        (C(lock_expected) in RV(dispatcher)) - only from 2.5.0 (C(lib/controller/dblock/dblock.go));
        before, a healthy dispatcher never holds it. Unset, the lock is taken to be expected.
    type: str
  command_timeout:
    description:
      - Seconds one C(squeue) (or C(scontrol)) may take before it is killed and the module fails. Slurm's
        clients give up on an unreachable controller after C(MessageTimeout).
      - At most V(86400) (a day).
    type: float
    default: 10
  db_wait:
    description:
      - Seconds to keep trying a database that refuses connections or does not answer. A
        wrong password or a missing database fails at once.
      - At most V(86400) (a day).
    type: float
    default: 30
  query_timeout:
    description:
      - Seconds one SQL statement may take (PostgreSQL C(statement_timeout)), the wait for a
        table's lock included - a read waits only behind an C(ACCESS EXCLUSIVE) lock (a
        migration, a C(LOCK TABLE)); the task then fails naming this option, the table and
        the session that holds it.
      - At most V(2147483), the longest C(statement_timeout) PostgreSQL takes.
    type: float
    default: 300
  batch_size:
    description:
      - UUIDs per set-based statement.
      - At most V(100000).
    type: int
    default: 10000
  crunch_v1_dispatcher:
    description:
      - What the caller knows of crunch-dispatch.rb, the crunch v1 dispatcher.
      - V(running) - it runs, and may run again a C(Running) job that has no Slurm job (after
        a node failure it keeps such jobs until idle nodes return); such jobs are listed in
        RV(jobs_awaiting_retry), never in RV(orphaned_jobs).
      - V(unknown) - no evidence either way; the same as V(running).
      - V(stopped) - it does not run; such jobs are orphaned (RV(orphaned_jobs)).
    type: str
    choices: [running, stopped, unknown]
    default: unknown
  orphan_grace:
    description:
      - Seconds. A C(Locked) container modified within this long before the first read (the
        database's clock) is never orphaned; RV(evidence) counts them
        (C(recently_modified)). crunch-dispatch-slurm locks a container, then waits for its
        next C(squeue) poll (C(Containers.CloudVMs.PollInterval), 10 s by default) before it
        submits it, so a container locked just before the read may rightly have no Slurm job
        yet. Arvados has no such grace for orphans, and C(Running) containers and crunch v1
        jobs get none (their Slurm job existed before they were C(Running)).
      - At most V(3600).
    type: float
    default: 60
  missing_are_stray:
    description:
      - Whether the Slurm jobs named after a UUID of the cluster that the database lacks
        (RV(missing_from_database)) are also stray (RV(stray_slurm_jobs)).
      - Unset - as Arvados does, per kind - those of crunch v1 jobs are stray
        (crunch-dispatch.rb's C(check_orphaned_slurm_jobs) cancels them, 1.4.3), those of
        containers are not (crunch-dispatch-slurm leaves them alone).
      - V(true) - both kinds are stray; set it only when this database is the cluster's
        primary and up to date. V(false) - neither is (read from a lagging replica or the
        wrong database, live work looks missing).
    type: bool
  retry_overdue_after:
    description:
      - Seconds. A job in RV(jobs_awaiting_retry) whose C(modified_at) is older than this
        (the database's clock, at the first read) is C(overdue) there, counted in
        RV(counts) (C(jobs_retry_overdue)). crunch-dispatch.rb keeps the jobs it will retry
        in memory only, so a restarted one never retries them and they stay C(Running) for
        ever.
      - The default is how long crunch-dispatch.rb 1.4.3 itself keeps a job it remembers
        waiting - it tries the job each second once a node is idle, holds off at most 5
        minutes for new nodes, and gives up after C(RETRY_UNLOCKED_LIMIT) (3) tries - 3 x
        300 s. Longer, it has forgotten the job or has no node to give it.
      - At most V(86400) (a day).
    type: float
    default: 900
  allow_standby:
    description:
      - Read a standby server (C(pg_is_in_recovery()) true) instead of failing. Its rows may
        lag the primary's, so live work may look missing or orphaned.
    type: bool
    default: false
notes:
  - Every option is checked before anything is read; a bad value is refused with a message
    naming the option.
  - The module runs where C(squeue) and the database are both reachable; the playbook
    C(recover_after_node_reboot.yml) runs it on the first C(slurm_controllers) host.
  - Orphans are not changed here. Crunch v1 jobs are failed with
    M(arvados_ops.recovery.arvados_fail_jobs) (O(arvados_ops.recovery.arvados_fail_jobs#module:uuids)).
    Containers are changed only through the API - start the dispatcher. At its start
    crunch-dispatch-slurm submits each C(Locked) container of its own that has no Slurm job
    and watches the others; a watched container whose Slurm job leaves the queue is
    cancelled when C(Running), unlocked when C(Locked).
seealso:
  - module: arvados_ops.recovery.arvados_fail_jobs
  - module: arvados_ops.recovery.slurm_job_cancel
  - name: The recovery playbooks
    description: recover_after_node_reboot.yml acts on this module's report.
    link: https://github.com/arvados-ops/recovery/blob/main/playbooks/README.md
  - name: How the reconciliation decides
    description: The rules for stray and orphaned, with the Arvados code they follow.
    link: https://github.com/arvados-ops/recovery/blob/main/README.md#what-arvados_reconcile_info-reports
  - name: Benchmarks
    description: Its cost against one squeue and one query, on a million jobs.
    link: https://github.com/arvados-ops/recovery/blob/main/bench/README.md#arvados_reconcile_info
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

- name: Name the nodes Slurm took down after a reboot it did not order
  ansible.builtin.debug:
    msg: "{{ reconcile.slurm_nodes | selectattr('reason_is_unexpected_reboot') | map(attribute='name') | list }}"

- name: Say how to fix each orphaned Locked container
  ansible.builtin.debug:
    msg: "{{ item.uuid }}: token {{ item.lock.token }}, {{ item.lock.action }}"
  loop: "{{ reconcile.orphaned_containers | selectattr('state', 'eq', 'Locked') | list }}"

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
jobs_ending:
  description: The Slurm jobs of crunch v1 jobs neither C(Running) nor C(Queued) but modified
    less than 60 seconds before the read (the database's clock), one entry per Slurm job,
    shaped as RV(stray_slurm_jobs)' entries with C(age_seconds) (seconds since the job's
    C(modified_at)) instead of C(priority). crunch-job is still saving their work; they are
    stray once 60 seconds have passed.
  returned: success
  type: list
  elements: dict
  sample: [{"job_id": "4244", "name": "zzzzz-8i9sb-0123456789abcde", "state": "RUNNING", "nodes": "compute1",
            "user": "crunch", "kind": "job", "record_state": "Cancelled", "age_seconds": 5.2,
            "reason": "job is Cancelled, modified 5.2 s ago: crunch-job is still saving its work, ..."}]
missing_from_database:
  description: The cluster's Slurm jobs named after a UUID the database lacks, one entry per
    Slurm job, shaped as RV(stray_slurm_jobs)' entries (C(record_state) and C(priority) null).
    They are in RV(stray_slurm_jobs) too where RV(missing_are_stray_by_kind) says so.
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
    entries plus C(age_seconds) (seconds since C(modified_at) at the first read, by the
    database's clock; null without one) and C(overdue) (true past
    O(retry_overdue_after)); C(reason) names the evidence, and for an overdue job says so
    first. Empty when withheld, see RV(orphans_withheld).
  returned: success
  type: list
  elements: dict
  sample: [{"uuid": "zzzzz-8i9sb-0123456789abcde", "state": "Running", "started_at": "2026-11-30T10:00:00.12",
            "is_locked_by_uuid": "zzzzz-tpzed-0123456789abcde", "age_seconds": 1250.3, "overdue": true,
            "reason": "awaiting crunch-dispatch.rb's retry for 1250 s, longer than retry_overdue_after (900 s): ..."}]
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
    lock:
      description: The diagnosis of a C(Locked) container's lock (read-only).
      type: dict
      returned: when the container is Locked
      contains:
        token: {description: "V(system_root_token) (the cluster's SystemRootToken: only the dispatcher
                              unlocks it), V(missing) (no such token: nothing can unlock it), V(expired),
                              or V(another) live token", type: str, returned: always, sample: system_root_token}
        token_user_uuid: {description: The token's user; null when it has no row, type: str, returned: always,
                          sample: null}
        token_expires_at: {description: "The token's expires_at, ISO 8601 UTC without zone; null when it has
                                         no row or never expires", type: str, returned: always, sample: null}
        lock_count: {description: How many times a dispatcher locked it, type: int, returned: always, sample: 3}
        max_dispatch_attempts: {description: RV(max_dispatch_attempts)'s value, type: int, returned: always,
                                sample: 10}
        dispatch_attempts_left: {description: "Locks left before an unlock cancels it; null when the
                                               limit is unknown", type: int, returned: always, sample: 7}
        action: {description: What would fix it, type: str, returned: always,
                 sample: "start the container dispatcher (it locks with the SystemRootToken): ..."}
    reason: {description: Why it is orphaned, type: str, returned: always, sample: "container is Running, but no Slurm job ..."}
  sample: []
max_dispatch_attempts:
  description: C(Containers.MaxDispatchAttempts), after which an unlock cancels a container,
    and where it came from - the C(config.yml) the database settings come from, else
    O(arvados_version)'s default; C(value) null when neither says.
  returned: when containers are reconciled
  type: dict
  sample: {"value": 10, "source": "Arvados 3.2.1's default"}
slurm_nodes:
  description: Slurm's nodes down or drained (a node both is C(down)), by name; empty without
    O(report_nodes).
  returned: success
  type: list
  elements: dict
  contains:
    name: {description: The node, type: str, returned: always, sample: compute1}
    state: {description: V(down) or V(drain), type: str, returned: always, sample: down}
    reason: {description: "Slurm's reason, without scontrol's C([user@time]); null when none", type: str,
             returned: always, sample: Node unexpectedly rebooted}
    reason_is_unexpected_reboot: {description: "True when the reason is exactly Slurm's own for a node that
                                                rebooted unexpectedly", type: bool, returned: always, sample: true}
    slurm_state: {description: "State= as scontrol shows it", type: str, returned: always, sample: DOWN}
    slurmd_responding: {description: "False when Slurm flags the node NOT_RESPONDING (its slurmd did not
                                      answer slurmctld's last ping)", type: bool, returned: always, sample: true}
    reason_set_by: {description: Who set the reason, type: str, returned: always, sample: slurm}
    reason_set_at: {description: "When, as scontrol shows it", type: str, returned: always, sample: "2026-12-03T10:00:06"}
  sample: [{"name": "compute1", "state": "down", "reason": "Node unexpectedly rebooted",
            "reason_is_unexpected_reboot": true, "slurm_state": "DOWN", "slurmd_responding": true,
            "reason_set_by": "slurm", "reason_set_at": "2026-12-03T10:00:06"}]
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
    re-read), and how many had none in the first but were spared as C(Locked) containers
    modified within O(orphan_grace) (C(recently_modified), always 0 for jobs).
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
    lock_expected: {description: "True when O(arvados_version) is 2.5.0 or later (its dispatchers take the lock),
                                  false before (they never do); null when O(arvados_version) is unset",
                    type: bool, returned: always, sample: true}
    holders: {description: "The holding sessions: pid, application_name, client_addr, backend_start", type: list,
              elements: dict, returned: always, sample: [{"pid": 4242, "application_name": "", "client_addr": "10.0.0.5/32",
                                                           "backend_start": "2026-11-30T10:00:00+00:00"}]}
    reason: {description: What that means, type: str, returned: always, sample: "a session holds the Dispatch advisory lock ..."}
  sample: {"lock_key": 10005, "lock_held": false, "lock_expected": null, "holders": [],
           "reason": "no session holds the Dispatch advisory lock (10005), which alone cannot tell ..."}
slurm:
  description: C(squeue_calls) (always 2), C(scontrol_calls) (1 with O(report_nodes), else 0),
    the cluster's Slurm jobs in each listing, and Slurm jobs named after other clusters' UUIDs.
  returned: success
  type: dict
  sample: {"squeue_calls": 2, "scontrol_calls": 1, "first_listing": 5, "second_listing": 5, "other_clusters_jobs": 0}
counts:
  description: The length of each list above, and C(jobs_retry_overdue), the jobs of
    RV(jobs_awaiting_retry) that are C(overdue).
  returned: success
  type: dict
  sample: {"stray_slurm_jobs": 1, "jobs_ending": 0, "missing_from_database": 0, "orphaned_jobs": 2, "jobs_awaiting_retry": 0,
           "orphaned_containers": 0, "skipped_other_user": 0, "slurm_nodes": 1, "jobs_retry_overdue": 0}
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
  description: The O(missing_are_stray) given (null when unset).
  returned: success
  type: bool
  sample: null
retry_overdue_after:
  description: The O(retry_overdue_after) used.
  returned: success
  type: float
  sample: 900.0
missing_are_stray_by_kind:
  description: Per kind reconciled, whether its Slurm jobs named after UUIDs the database
    lacks were stray in this run (O(missing_are_stray), else as Arvados does).
  returned: success
  type: dict
  sample: {"jobs": true, "containers": false}
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

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import argument_spec
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules.support import run_engine
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.run import (
    ALL_OPTIONS,
    run_reconcile,
)


def main():
    # As arvados_fail_jobs: the engine checks which database options exclude each other.
    module = AnsibleModule(argument_spec=argument_spec(ALL_OPTIONS), supports_check_mode=True)
    run_engine(module, run_reconcile, ALL_OPTIONS, missing_required_lib)


if __name__ == "__main__":
    main()
