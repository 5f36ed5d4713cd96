#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: arvados_fail_jobs
short_description: Fail or requeue the Arvados jobs a reboot left Running, in PostgreSQL
version_added: 1.0.0
description:
  - After an Arvados API server crashed or rebooted, its database still calls crunch v1 jobs
    C(Running) that nothing runs or watches, Slurm may still hold jobs named after them, and
    each job's API token stays valid. This module puts that right directly in Arvados'
    PostgreSQL database, so it can run before the API server starts.
  - For each qualifying job it makes the Slurm jobs named after the job absent (see
    O(cancel_slurm_jobs)), expires the token the dispatcher made for the job (see
    O(revoke_tokens)), marks the job C(Failed) (or puts it back in the queue, see O(retry)),
    and writes the C(dispatch) and C(update) C(logs) rows Arvados writes when it fails a job
    (and the C(update) row of each expired token, without its secret), so that Workbench and
    other websocket clients see the change; the C(update) rows follow O(audit_logs).
  - A job qualifies when it is C(Running) and, with O(before), started before that time
    (others are reported in RV(exempt)); O(uuids) narrows the set further. Nothing else is
    changed - no job in another state, no Slurm job whose name is not a job UUID, no token
    another job or pipeline instance of the user could own (RV(tokens_left_alone)). Token
    secrets are never read.
  - Check mode reads the same rows and the Slurm queue, reports exactly the jobs, tokens and
    Slurm jobs a real run would touch, and writes nothing. Each batch of jobs is one
    transaction, so a run killed at any instant leaves every job untouched or completely
    done; a rerun finishes the rest, and a rerun after a complete run reports
    C(changed=false).
  - Before anything changes, Slurm included, every option is checked against its bounds and
    the database user's table privileges are checked (see the notes); a failure names the
    option or the table. The run never waits on a row another session holds, so the API
    server is not blocked (see O(row_lock_wait)). Two runs never work at once (see
    O(lock_wait)), and a standby server is refused.
  - Run it at boot, before the API server starts (the C(boot_recovery) role installs the same
    cleanup as the C(arvados-fail-jobs) command, with the same options as flags), or from the
    C(recover_after_reboot.yml) playbook. With the API server up, O(live) keeps its writes fast.
author:
  - Arvados Ops recovery maintainers (@arvados-ops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - arvados_ops.recovery.arvados_db
attributes:
  check_mode:
    support: full
    details: Reads the same rows and the Slurm queue, reports exactly the jobs, tokens
      and Slurm jobs a real run would touch, and writes nothing.
  diff_mode:
    support: full
    details: Lists each job with its state before and after.
  platform:
    details: Runs where Python reaches the database; Slurm is asked on the same host.
    support: full
    platforms: posix
requirements:
  - psycopg 3 (C(python3-psycopg) on Debian 12+ and Ubuntu 24.04) or, where the release has only that,
    psycopg2 2.8.6 or later (C(python3-psycopg2) on Debian 11 and Ubuntu 22.04) on the host the
    module runs on; psycopg 3 is taken when both are there
  - PyYAML when the database settings come from a file
  - the Slurm client tools on that host, to cancel the jobs' Slurm jobs
options:
  before:
    description:
      - Only jobs started before this time qualify; the others are left alone and reported
        in RV(exempt). Unset, every C(Running) job qualifies.
      - V(reboot) is this host's boot, on the database's clock (the clock Arvados writes
        C(started_at) by), its C(now()) less this host's uptime, so a host whose clock is off
        at boot, before NTP sets it, moves nothing. Otherwise C(@<epoch seconds>) (V(@1448378837)),
        ISO 8601 (V(2015-11-24T10:27:17-05:00); without a zone, this host's time) or what
        C(date) prints (V(Tue Nov 24 10:27:17 EST 2015)).
      - A job without C(started_at) qualifies only when O(before) is unset; it is listed in
        RV(no_started_at) and none of its tokens is revoked.
      - "Refused before anything is read or changed, with a message naming O(before) and the value:
        an empty value (V(\"\"), an unset variable), which is not no threshold (for no threshold leave
        O(before) out, null or C(default(omit))); a time later than the database's C(now())
        (a typo such as V(2026-12-14) for V(2026-12-04) would fail every healthy job); a time
        beyond year 9999 in UTC; and a time without a zone that this host's zone makes
        ambiguous (repeated or skipped by a clock change), or when C(TZ) names no zone or gives
        an offset outside -12:00 to +14:00 (C(TZ=UTC+25))."
    type: str
  uuids:
    description:
      - Only these job UUIDs (C(<prefix>-8i9sb-<15 characters>)), for playbooks that choose
        the set first. Jobs of the list that are not C(Running) are ignored.
    type: list
    elements: str
  retry:
    description:
      - Put the jobs back in the queue (C(Queued), their run's fields cleared and their
        C(job_tasks) deleted) instead of failing them.
      - A requeued job runs again as the user whose token ran it, never as the system user. That
        is C(is_locked_by_uuid) where it names a user other than the system user, else
        C(modified_by_user_uuid). Arvados 1.4.3's crunch-dispatch.rb makes a job's token for
        C(modified_by_user_uuid) (C(get_authorization)), and crunch-job locks the job with that
        token, which stores its user in C(is_locked_by_uuid); C(modified_by_user_uuid) may since
        name an admin who changed the job's priority. The requeue writes the user into
        C(modified_by_user_uuid), where the next C(get_authorization) reads it.
      - A job whose row names no such user is failed instead and listed in RV(not_requeued).
    type: bool
    default: false
  revoke_tokens:
    description:
      - Expire the API token the dispatcher made for each job (C(expires_at) set to now).
      - Tokens are matched by how the dispatcher made them, since no column links a job to
        its token. One that another job or pipeline instance of the same user could own is
        left valid and listed in RV(tokens_left_alone) for a person to look at - any job of
        the user created before the token that is C(Queued) or C(Running), or that ended at
        or after it, since crunch-dispatch.rb keeps a job's token across a tempfail and a
        node failure's retry.
    type: bool
    default: true
  log_message:
    description:
      - The text of the C(dispatch) C(logs) row written for each job (C(summary) and
        C(properties.text)). The default says the job was left C(Running) by a server going
        down and was marked C(Failed) (or put back in the queue).
      - At most 2500 bytes of UTF-8, and with O(retry) 2500 less the note added for a job
        failed instead (183 bytes), so that the row fits the index on C(logs.summary).
    type: str
  batch_size:
    description:
      - Jobs per transaction, for example V(500). Larger batches finish sooner; smaller ones
        hold fewer rows at once and delay the API server's writes less.
      - Given, every batch has this size; live, the pause is still steered (see O(batch_pause)).
      - Unset, V(1000) at boot; live (see O(live)) it starts at V(100) and is steered after
        each batch, between V(10) and V(1000) - smaller while a batch's commit takes more than
        about 10 ms (an API commit meeting it waits that long) or the batch more than 0.5 s
        (the API's commits queue behind its writes), else larger while a batch takes more
        than half of its share of time at the pace's rate (each batch reads C(jobs) once
        for the tokens' rule, a fixed cost). RV(pace) says what was chosen.
        At most V(100000).
    type: int
  lock_wait:
    description:
      - Seconds to wait for another run of this cleanup (the boot unit or a playbook, kept
        apart by a PostgreSQL advisory lock) to finish before failing. It bounds that wait
        only; every wait for a lock another session holds on a table or a row is
        O(row_lock_wait)'s.
      - At most V(86400) (a day).
    type: float
    default: 60
  row_lock_wait:
    description:
      - Seconds the whole run may spend waiting for locks other sessions hold. A job whose
        row, token or task is locked is set aside and tried again after the other batches,
        never waited for while the run holds rows, so the API server is not held up.
      - Jobs still locked when this is spent are left C(Running), their Slurm jobs already
        absent, and listed in RV(locked_jobs); a rerun finishes them. V(0) tries them once
        more only.
      - The same budget bounds the waits outside the batches (PostgreSQL's C(lock_timeout)
        on both of the run's sessions), in check mode too - above all the listing of the
        C(Running) jobs, which waits behind an C(ACCESS EXCLUSIVE) lock on C(jobs) (a
        migration, a C(LOCK TABLE)). A listing not had within it fails the run before
        anything changes, Slurm included, with a message naming this option, the table and
        the sessions that hold it.
      - At most V(2147483).
    type: float
    default: 10
  full_scan:
    description:
      - "Read every C(Running) job, as Arvados' own cleanup does (C(fail_jobs) in 1.4.3
        C(services/api/lib/crunch_dispatch.rb) takes the jobs C(Running) and started before
        the threshold, whatever C(finished_at) says). Arvados 1.4.3's C(Job) model accepts a
        C(finished_at) on a job that stays C(Running), and its own test fixtures hold one
        (C(runningbarbaz)); such jobs are cleaned up like the others and listed in
        RV(running_with_finished_at)."
      - V(false) reads only the C(Running) jobs without C(finished_at), through the index on
        C(finished_at) - faster on a large cluster (measured on a million jobs, 0.08 s
        against 0.44 s with a cold cache), but blind to those rows.
    type: bool
    default: true
  audit_logs:
    description:
      - Whether to write the C(update) audit C(logs) row of each job and each expired token, as
        Arvados writes one for every change it makes when audit logging is on. The C(dispatch)
        row of each job is no audit row and is always written, as Arvados' own C(fail_job) does.
      - V(auto) follows the cluster's C(AuditLogs) settings in the C(config.yml) the run reads
        (O(config_file), else C(/etc/arvados/config.yml) if it exists), as Arvados'
        C(is_audit_logging_enabled?) reads them (1.4.3 to 3.2.1
        C(services/api/app/models/arvados_model.rb)) - off only when C(MaxAge) is under one
        second and C(MaxDeleteBatch) is above 0; a key it does not set has Arvados' default
        (C(336h), C(0)). Without a C(config.yml) to read (O(database_yml), or
        O(config_file) set to V('')), rows are written, Arvados' default.
      - V(false) for a cluster that turns audit logs off where the run cannot read it - Arvados
        1.3 (C(max_audit_log_age) and C(max_audit_log_delete_batch) in C(application.yml)), or a
        legacy C(application.yml) of 1.4 and later, whose keys override C(config.yml) - and
        V(true) to write them whatever the file says. Arvados 1.1 and 1.2 always write them.
      - RV(audit_logs) says which applied and why.
    type: raw
    default: auto
  live:
    description:
      - Whether the API server (or another client) uses the database during the run.
      - V(false), for boot when nothing else writes - batches of 1000 at full speed, and the
        jobs' trigram search index collects its new entries to merge them a few times per run
        (see the notes). An API write meanwhile may wait seconds for such a merge.
      - V(true) - batches paced by what the database says of them (see O(batch_size),
        O(batch_pause) and RV(pace)), and each
        batch merges its own index entries, so the API server's writes stay close to their
        usual speed. The run is many times slower; a cleanup after a node reboot, a few
        hundred jobs, still takes seconds.
      - V(auto) - V(true) when other sessions are connected to the database, as the API
        server's are once it runs.
    type: raw
    default: auto
  batch_pause:
    description:
      - Seconds to pause between batches, leaving the database to other clients, for example
        V(0.5). The run takes that much longer per O(batch_size) jobs.
      - Given, every pause; live, the batch size is still steered (see O(batch_size)). With
        both given the run keeps exactly that pace.
      - Unset, V(0) at boot. Live (see O(live)), what keeps the run at 200 jobs a second
        (100,000 jobs in about 8 minutes) after the batch's own time; halved, down to 50 jobs
        a second, each time two or more other sessions are seen queued for the write-ahead
        log's locks or a lock as a batch commits (wait events are visible to the run for
        sessions of its own database role, as the API server's are), and won back by a
        twentieth per batch without. Check mode does not pause.
      - Where the API server's latency comes first, a fixed pace is gentler. On a 2-core lab
        with one disk, O(batch_size=100) with O(batch_pause=2) kept the p99 of the API's job
        updates within about twice its level (median 1.64 times) and took 35 to 43 minutes for
        100,000 jobs, where the live default took 8.6 minutes and raised it 3.6 to 4.9 times
        (bench/README.md).
      - At most V(86400) (a day).
    type: float
  db_wait:
    description:
      - Seconds to keep trying a database that refuses connections or does not answer, as at
        boot while PostgreSQL starts. A wrong password or a missing database fails at once.
      - At most V(86400) (a day).
    type: float
    default: 30
  cancel_slurm_jobs:
    description:
      - Make the Slurm jobs named after the jobs' UUIDs absent before the database changes,
        as M(arvados_ops.recovery.slurm_job_cancel) does. Only Slurm jobs named exactly like
        a job UUID (C(^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$)) are considered.
      - V(auto) and V(true) do so with the C(squeue) and C(scancel) of this host (or
        O(squeue_path) and O(scancel_path)). Without C(squeue) on this host and without
        O(squeue_path), V(auto) fails the task before anything is read from the database or
        changed, saying what to set (a job is never failed while its Slurm job may still
        run); V(true) fails it too, naming the missing program.
      - V(false) never asks Slurm. Set it when the site runs no Slurm, or when another step
        makes the jobs' Slurm jobs absent, as C(recover_after_reboot.yml) does on its
        C(slurm_controllers) hosts (it passes V(false) to this module on C(arvados_api)).
    type: raw
    default: auto
  slurm_errors:
    description:
      - What to do when Slurm cannot be reached or a batch's Slurm jobs do not leave the queue
        within O(slurm_timeout).
      - V(fail) fails before that batch changes anything in the database; V(ignore) warns and
        goes on, leaving those Slurm jobs queued.
    type: str
    choices: [fail, ignore]
    default: fail
  slurm_timeout:
    description:
      - Seconds one batch may spend making its Slurm jobs absent.
      - At most V(86400) (a day).
    type: float
    default: 120
  slurm_user:
    description:
      - Only Slurm jobs of this user (the dispatcher's) are cancelled, for example V(crunch).
      - A job never has its row changed while a Slurm job of its name is queued, whoever owns
        it. A job whose Slurm job belongs to another user is left C(Running), untouched (token
        and row), and listed in RV(held_by_other_users); the run goes on with the others and
        then fails, naming O(slurm_user), its value, the jobs and the users that own their
        Slurm jobs.
    type: str
  slurm_max_scancel_per_second:
    description:
      - Rate limit of C(scancel) calls.
      - At most V(1000).
    type: float
    default: 10
  slurm_max_concurrent_scancel:
    description:
      - How many C(scancel) processes may be alive at once.
      - At most V(64).
    type: int
    default: 3
  squeue_path:
    description:
      - The C(squeue) to run, for example V(/usr/bin/squeue). Default, found in E(PATH) and the
        sbin directories.
    type: path
  scancel_path:
    description:
      - The C(scancel) to run, for example V(/usr/bin/scancel). Default, found in E(PATH) and the
        sbin directories.
    type: path
notes:
  - Every option is checked before anything is read or changed; a number past its bound, or a
    text with a NUL character, is refused with a message naming the option.
  - "The database user needs these privileges on whole tables (C(LOCK TABLE) takes no
    column privileges): C(SELECT) and C(UPDATE) on C(jobs); C(SELECT) and C(INSERT) on
    C(logs) and C(USAGE) on its id sequence; with O(revoke_tokens), C(SELECT) and C(UPDATE)
    on C(api_client_authorizations) and C(SELECT) on C(users), C(containers) and
    C(pipeline_instances); with O(retry), C(SELECT), C(UPDATE) and C(DELETE) on
    C(job_tasks). A missing one fails the run before any Slurm job is cancelled, in check
    mode too."
  - If a batch's transaction fails after its Slurm step, the error names the jobs left
    C(Running) without a Slurm job; a rerun finishes them.
  - For its own transactions a run raises C(gin_pending_list_limit) to 256 MB and
    C(work_mem) to 64 MB (never lowering a larger server setting); when O(live) is on,
    C(gin_pending_list_limit) stays the server's. Until the run's last batch merges the
    trigram index's pending entries, text searches of jobs read them and are slower; an
    interrupted run can leave them pending until the next write to C(jobs) or autovacuum.
  - With the API server up, its commits mostly wait for the run's write-ahead log to reach
    the disk. The server's administrator can shorten that wait with C(wal_compression), a
    larger C(max_wal_size) and the WAL on a fast disk.
  - Timestamps in Arvados' database are UTC; RV(threshold) is reported in UTC.
seealso:
  - module: arvados_ops.recovery.slurm_job_cancel
  - module: arvados_ops.recovery.arvados_reconcile_info
  - name: The boot_recovery role
    description: Runs the same cleanup at boot, before the API server starts.
    link: https://github.com/arvados-ops/recovery/blob/main/roles/boot_recovery/README.md
  - name: The recovery playbooks
    description: Which playbook to run after which reboot.
    link: https://github.com/arvados-ops/recovery/blob/main/playbooks/README.md
  - name: How the cleanup decides
    description: Which jobs and tokens it changes and what it writes, with Arvados' sources.
    link: https://github.com/arvados-ops/recovery/blob/main/README.md#what-arvados_fail_jobs-changes
  - name: Benchmarks
    description: Speed, and the API server's latency during a run, live and at boot.
    link: https://github.com/arvados-ops/recovery/blob/main/bench/README.md#arvados_fail_jobs-beside-a-live-api-server-issue-11
"""

EXAMPLES = r"""
- name: Fail the jobs the last reboot of this API server left Running
  arvados_ops.recovery.arvados_fail_jobs:
    before: reboot

- name: Requeue the jobs started before a given time, keeping their tokens
  arvados_ops.recovery.arvados_fail_jobs:
    before: "2015-11-24T10:27:17-05:00"
    retry: true
    revoke_tokens: false

- name: Fail exactly the jobs an earlier task chose, with explicit database settings
  arvados_ops.recovery.arvados_fail_jobs:
    uuids: "{{ stale_jobs }}"
    db_host: db.example.org
    db_name: arvados_production
    db_user: arvados
    db_password: "{{ vault_arvados_db_password }}"
    cancel_slurm_jobs: false

- name: See what a cleanup would do
  arvados_ops.recovery.arvados_fail_jobs:
    before: reboot
  check_mode: true
  diff: true
  register: preview
"""

RETURN = r"""
threshold:
  description: The O(before) instant, in UTC, ISO 8601; null without O(before).
  returned: always
  type: str
  sample: "2026-11-30T12:07:56Z"
threshold_source:
  description: Where the threshold came from; null without O(before).
  returned: always
  type: str
  sample: "reboot (the database's now() less this host's uptime, 41.07 s; btime 1796040476 in /proc/stat)"
failed_jobs:
  description: UUIDs of the jobs marked C(Failed) (in check mode, that would be).
  returned: when O(retry=false)
  type: list
  elements: str
  sample: ["zzzzz-8i9sb-rx5jc1btxig25i6"]
requeued_jobs:
  description: UUIDs of the jobs put back in the queue (in check mode, that would be).
  returned: when O(retry=true)
  type: list
  elements: str
  sample: ["zzzzz-8i9sb-rx5jc1btxig25i6"]
exempt:
  description: The C(Running) jobs started at or after the threshold, left alone.
  returned: always
  type: dict
  contains:
    count:
      description: How many.
      type: int
      sample: 1
    uuids:
      description: Their UUIDs.
      type: list
      elements: str
      sample: ["zzzzz-8i9sb-l1813b3logug6pr"]
no_started_at:
  description: C(Running) jobs without C(started_at); see O(before) for what is done with them.
  returned: always
  type: list
  elements: str
  sample: []
skipped_jobs:
  description: Jobs that qualified when listed but had changed (finished, or restarted after
    the threshold) when their batch locked them; left alone.
  returned: always
  type: list
  elements: str
  sample: []
locked_jobs:
  description: Jobs whose row, token or (with O(retry)) task another transaction kept
    locked past the run's O(row_lock_wait); left C(Running), their Slurm jobs already
    absent when the Slurm step ran; a rerun cleans them up. Always empty in check mode,
    which takes no lock.
  returned: always
  type: list
  elements: str
  sample: ["zzzzz-8i9sb-0v4xh2ebj7l1m0c"]
held_by_other_users:
  description: The Slurm jobs, queued under another user than O(slurm_user), named after a
    qualifying job, which was therefore left C(Running) and untouched (in check mode, would
    be); the run then fails. One entry per Slurm job.
  returned: always
  type: list
  elements: dict
  contains:
    uuid: {description: The job left Running, type: str, returned: always, sample: zzzzz-8i9sb-0v4xh2ebj7l1m0c}
    job_id: {description: The Slurm job's id, type: str, returned: always, sample: "4242"}
    user: {description: The user that owns the Slurm job, type: str, returned: always, sample: root}
    state: {description: Its state as squeue said it, type: str, returned: always, sample: RUNNING}
  sample: []
running_with_finished_at:
  description: C(Running) jobs whose C(finished_at) is set (inconsistent rows), found with
    O(full_scan) or O(uuids); cleaned up like the others when they qualify.
  returned: always
  type: list
  elements: str
  sample: []
not_requeued:
  description: With O(retry), the jobs failed instead of requeued because their row names no
    user to run them as (see O(retry)); in check mode, that would be.
  returned: when O(retry=true)
  type: list
  elements: str
  sample: []
revoked_tokens:
  description: UUIDs of the API tokens expired (in check mode, that would be). Never the secrets.
  returned: always
  type: list
  elements: str
  sample: ["zzzzz-gj3su-0k6v1i2mxn9x3cq"]
tokens_left_alone:
  description: Tokens in a cleaned job's window that another job or pipeline instance, not
    ended by this run, could own; left valid. Each needs a person's look.
  returned: always
  type: list
  elements: dict
  contains:
    uuid: {description: The token's UUID (never its secret), type: str, returned: always, sample: zzzzz-gj3su-0k6v1i2mxn9x3cq}
    user_uuid: {description: Its user, type: str, returned: always, sample: zzzzz-tpzed-0123456789abcde}
    could_belong_to: {description: "The job or pipeline instance that could own it: of several, a job before a
                        pipeline instance, and of jobs the one whose window reaches furthest", type: str,
                      returned: always, sample: zzzzz-8i9sb-l1813b3logug6pr}
  sample: []
log_uuids:
  description: UUIDs of the C(logs) rows written, two per job (C(dispatch) and C(update));
    empty in check mode.
  returned: always
  type: list
  elements: str
  sample: ["zzzzz-57u5n-6y0f4x4fmaz7w0e", "zzzzz-57u5n-9a0d0l1k2mxz7w1"]
counts:
  description: How many jobs were done, skipped, tokens revoked and left alone, log rows
    written (in check mode, would be), and jobs held by another user's Slurm jobs.
  returned: always
  type: dict
  sample: {"jobs": 19, "skipped_jobs": 0, "revoked_tokens": 19, "tokens_left_alone": 0, "logs": 38, "held_by_other_users": 0}
slurm:
  description:
    - The results of the Slurm cancel engine, summed over the batches (the keys of
      M(arvados_ops.recovery.slurm_job_cancel)'s result, such as C(cancelled),
      C(already_absent), C(squeue_calls), C(scancel_calls)).
    - Only C(skipped) with the reason when Slurm was not asked; empty when no job qualified.
  returned: always
  type: dict
  sample: {"cancelled": [], "already_absent": ["zzzzz-8i9sb-rx5jc1btxig25i6"], "squeue_calls": 1, "scancel_calls": 0}
  contains:
    skipped:
      description: Why Slurm was not asked (O(cancel_slurm_jobs) false).
      returned: when Slurm was not asked
      type: str
      sample: "cancel_slurm_jobs is false"
    cancelled:
      description: The jobs' Slurm jobs cancelled (in check mode, that would be), with their state when first seen.
      returned: when Slurm was asked
      type: list
      elements: dict
      sample: [{"name": "zzzzz-8i9sb-rx5jc1btxig25i6", "job_id": "4241", "state_before": "RUNNING", "user": "crunch"}]
    already_absent:
      description: Jobs with no Slurm job of their name in the queue.
      returned: when Slurm was asked
      type: list
      elements: str
      sample: ["zzzzz-8i9sb-rx5jc1btxig25i6"]
    skipped_other_user:
      description: Slurm jobs of a job's name that belong to another user than O(slurm_user); left alone.
      returned: when Slurm was asked
      type: list
      elements: dict
      sample: []
    remaining:
      description: Slurm jobs still queued when the Slurm step gave up.
      returned: when Slurm was asked
      type: list
      elements: dict
      sample: []
    squeue_calls:
      description: C(squeue) processes started, summed over the batches.
      returned: when Slurm was asked
      type: int
      sample: 1
    scancel_calls:
      description: C(scancel) processes started, summed over the batches.
      returned: when Slurm was asked
      type: int
      sample: 1
    messages:
      description: The Slurm step's "still in queue" and error messages.
      returned: when Slurm was asked
      type: list
      elements: str
      sample: []
batches:
  description: How many batches had qualifying jobs.
  returned: always
  type: int
  sample: 1
live:
  description: Whether the run took the database as used by others (see O(live)).
  returned: always
  type: bool
  sample: false
pace:
  description: The pace the run chose (see O(batch_size) and O(batch_pause)).
  returned: always
  type: dict
  contains:
    mode:
      description: >-
        V(adaptive) (live, an option left unset, steered), V(fixed) (both options given, or
        one at boot), V(full speed) (at boot) or V(check) (check mode, no pause).
      type: str
      sample: adaptive
    batch_size:
      description: The median size of the batches.
      type: int
      sample: 100
    batch_size_range:
      description: The smallest and the largest batch, empty without a batch.
      type: list
      elements: int
      sample: [37, 100]
    pause_seconds:
      description: Seconds paused between batches in all.
      type: float
      sample: 312.4
    jobs_per_second:
      description: Jobs through the batches a second, pauses included; null without a batch.
      type: float
      sample: 190.5
    commit_ms:
      description: The median time of a batch's commit, milliseconds; null without a commit.
      type: float
      sample: 9.7
    backoffs:
      description: How many times other sessions were seen waiting and the rate was halved.
      type: int
      sample: 0
database:
  description: Where the connection settings came from (never the password).
  returned: always
  type: str
  sample: "config_file /etc/arvados/config.yml, cluster zzzzz"
audit_logs:
  description: Whether the C(update) audit rows were written (see O(audit_logs)), and why.
  returned: always
  type: dict
  contains:
    written:
      description: True when the run writes them.
      type: bool
      sample: true
    source:
      description: What decided it - the option, the C(AuditLogs) settings read, or Arvados' default.
      type: str
      sample: "config_file /etc/arvados/config.yml, AuditLogs (MaxAge 0s, MaxDeleteBatch 100000)"
diff:
  description: Each job with its state before and after.
  returned: in diff mode
  type: dict
  sample: {"before": "zzzzz-8i9sb-rx5jc1btxig25i6: Running\n", "after": "zzzzz-8i9sb-rx5jc1btxig25i6: Failed\n"}
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.run import (
    ALL_OPTIONS,
    run_fail_jobs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import argument_spec
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules.support import run_engine


def main():
    # No mutually_exclusive here: Ansible counts an option given as '' as given, while
    # '' means "no such file" to the engine, which checks the pairs for the module and
    # the command alike.
    module = AnsibleModule(argument_spec=argument_spec(ALL_OPTIONS), supports_check_mode=True)
    run_engine(
        module,
        lambda params: run_fail_jobs(params, check_mode=module.check_mode, diff=module._diff),
        ALL_OPTIONS,
        missing_required_lib,
    )


if __name__ == "__main__":
    main()
