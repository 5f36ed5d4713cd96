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
version_added: 0.1.0
description:
  - When an Arvados API server crashes or reboots while crunch v1 jobs run, the database
    still says C(Running) but nothing watches them; Slurm may still hold jobs named after
    them, and each job's API token stays valid for ever. This module puts that right
    directly in Arvados' PostgreSQL database, so it works before the API server is up.
  - The C(Running) jobs are found through the index on C(finished_at)
    (C(index_jobs_on_finished_at)), because every C(Running) job Arvados writes has no C(finished_at),
    so a run reads the unfinished jobs only, not the whole table. A C(Running) row with
    C(finished_at) set is an inconsistent row that only O(full_scan) (or naming it in
    O(uuids)) finds; such rows are listed in RV(running_with_finished_at).
  - The list is read once into a cursor kept on the server (C(WITH HOLD)) and fetched a batch
    at a time, so no transaction or snapshot of the run lasts longer than one batch (a long
    one would hold back vacuum on every table) and the memory used stays flat.
  - Jobs in state C(Running) qualify; with O(before), only those started before it. A
    C(Running) job without C(started_at) is an inconsistent row. Without O(before) it
    qualifies like the others; with O(before) nothing shows it started before the threshold,
    so it is left alone. Either way it is listed in RV(no_started_at).
  - For each batch of O(batch_size) jobs, the Slurm jobs named after their UUIDs are made
    absent first (see O(cancel_slurm_jobs)); then one transaction locks the rows,
    re-checks that each job is still C(Running) and qualifies (others are listed in
    RV(skipped_jobs)), expires the jobs' API tokens, marks the jobs C(Failed) (or, with
    O(retry), puts them back in the queue scrubbed and deletes their tasks), writes the two
    C(logs) rows Arvados wrote when it failed a job and notifies C(logs) listeners (the
    websocket server), which are crunch-dispatch.rb's C(dispatch) row with the message (owned by the
    job's owner), then the model's C(update) audit row with the job's old and new
    attributes, which the websocket server forwards to Workbench and other clients
    (Arvados 1.4.3 C(services/api/lib/crunch_dispatch.rb) C(fail_job),
    C(app/models/arvados_model.rb) C(log_update)).
  - A batch never waits on a lock while it holds job rows. It first locks the tables it
    writes, in the modes its statements take anyway (a table locked by a migration is
    waited for there, holding no row); then it takes the job rows, the tokens to revoke
    and, with O(retry), the tasks to delete, skipping any row another transaction holds
    (C(SKIP LOCKED)). A job whose row, token or task is held is set aside and the rest of
    the batch is done. The set-aside jobs are tried again after the other batches; those
    still locked when the run's wait for locks reaches O(row_lock_wait) are listed in
    RV(locked_jobs) and left C(Running) (their Slurm jobs already absent) for a rerun,
    which finishes them.
  - Before the Slurm step, and in check mode too, the run checks that the database user
    has the table privileges a real run uses (C(SELECT) and C(UPDATE) on C(jobs),
    C(SELECT) and C(INSERT) on C(logs) and C(USAGE) on its id sequence; with
    O(revoke_tokens) C(SELECT) and C(UPDATE) on C(api_client_authorizations) and
    C(SELECT) on C(users), C(containers) and C(pipeline_instances); with O(retry)
    C(SELECT), C(UPDATE) and C(DELETE) on C(job_tasks)); a missing one fails the run, named
    with its table, before any Slurm job is cancelled or any row written. Table privileges,
    not column ones, as C(LOCK TABLE) needs them.
  - If a batch's transaction fails after its Slurm step, the error names the jobs that now
    have no Slurm job and are still C(Running), and says that a rerun finishes them.
  - Killing the process at any instant leaves each job either untouched or completely done
    (state, log row, tasks and tokens together); a rerun finishes the rest. A rerun after a
    complete run changes nothing and reports C(changed=false).
  - A PostgreSQL advisory lock keeps two runs (the boot unit and a playbook) from working at
    once; the second waits O(lock_wait) seconds, then fails.
  - A job's token is found as the dispatcher made it, since no column links the two; a
    token qualifies when it has C(api_client_id=0), has not expired, belongs to the user in
    the job's C(is_locked_by_uuid), was created between the job's creation and its start,
    and is not a container's token (C(containers.auth_uuid)). A job without C(started_at) has
    no such window, so no token is revoked for it. Token secrets are never read into the
    result, only token UUIDs.
  - Such a token may be another's, and is then left valid and listed in
    RV(tokens_left_alone), since crunch-dispatch.rb made every job's token the same way, so a
    sibling job of the same user dispatched while this one was queued has its token in this
    job's window, and so do the tokens it made for C(arv-run-pipeline-instance). A token is
    left alone when another job of its user, not ended by this run, holds it in its own
    window and is C(Running) or finished after the token was made (not by a cleanup; a
    C(dispatch) log row written after the token says a job was ended), or when a pipeline
    instance of the user has been C(RunningOnServer) since before the token. With one job
    per user at a time, the job's own token is still found and revoked.
  - On a database of Arvados 3.0 or later, every new token has C(api_client_id=0), so the
    value no longer tells a dispatcher's token from a login's. The rule stays sound there, as
    no crunch v1 job has started since the cluster ran 1.x, and a job's window closes at its
    start, so no token made since falls in one.
  - A database server in recovery (a standby, C(pg_is_in_recovery())) is refused before
    anything is done, Slurm included, as it takes no writes and its rows may lag behind.
  - The same cleanup is available without Ansible as the C(arvados-fail-jobs) command
    (see the C(boot_recovery) role), with the same options as flags.
  - Every option is checked before anything is read or changed, Slurm included, against what
    its consumer accepts - each number against its upper bound (stated with the option), each
    text against what PostgreSQL stores (no NUL character) - and a bad value is refused with
    a message that names the option and the value, its control characters escaped. A
    failure's message masks the O(db_password) given, so it says why (a wrong password, for
    example) without the secret.
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
      - Only jobs started before this instant qualify; jobs started at or after it are
        exempt (RV(exempt)).
      - V(reboot) is this host's boot time (C(btime) in C(/proc/stat)). Otherwise a time as
        C(@<epoch seconds>) (V(@1448378837)), ISO 8601 with or without zone
        (V(2015-11-24T10:27:17-05:00), V(2015-11-24 10:27:17)), or what C(date) prints
        (V(Tue Nov 24 10:27:17 EST 2015)). A time without zone is this host's local time.
      - Unset, every C(Running) job qualifies.
    type: str
  uuids:
    description:
      - Only these job UUIDs (C(<prefix>-8i9sb-<15 characters>)), for playbooks that choose
        the set first. Jobs of the list that are not C(Running) are ignored.
    type: list
    elements: str
  retry:
    description:
      - Put the jobs back in the queue instead of failing them. The row is scrubbed
        (C(state=Queued), C(running=false), C(success), C(started_at), C(finished_at),
        C(cancelled_at), C(is_locked_by_uuid), C(log) and C(output) emptied,
        C(tasks_summary) reset) and the job's C(job_tasks) are deleted.
      - The requeued row keeps naming the user the job runs as, in
        C(modified_by_user_uuid), since crunch-dispatch.rb makes the next run's token for that
        user (Arvados 1.4.3 C(get_authorization)), so the system user there would run the job
        with an admin token. Where the row names the system user or nobody there, the user
        in C(is_locked_by_uuid) (whose token ran it); a job that names neither is failed
        instead, listed in RV(not_requeued), with a C(dispatch) row that says why.
    type: bool
    default: false
  revoke_tokens:
    description:
      - Expire the jobs' API tokens (C(expires_at) set to now), except those another job or
        pipeline instance could own (see the description), which are listed in
        RV(tokens_left_alone).
    type: bool
    default: true
  log_message:
    description:
      - The text of the C(dispatch) C(logs) row written for each job (C(summary) and
        C(properties.text)).
      - The default says the job was left C(Running) by a server going down and was marked
        C(Failed) (or put back in the queue).
      - At most 2500 bytes of UTF-8, and with O(retry) 2500 less the note added for a job
        failed instead (183 bytes), since C(logs.summary) has a btree index
        (C(index_logs_on_summary)) whose rows PostgreSQL caps at 2704 bytes. A longer
        message, or one with a NUL character, is refused before anything is done.
    type: str
  batch_size:
    description:
      - Jobs per transaction, for example V(500).
      - Unset, V(1000) at boot and V(100) when live (see O(live)).
      - At most V(100000), else the option is refused before anything is done.
    type: int
  lock_wait:
    description:
      - Seconds to wait for another run of this cleanup (which holds the advisory lock) to
        finish before failing.
      - At most V(86400) (a day), else the option is refused before anything is done.
    type: float
    default: 60
  row_lock_wait:
    description:
      - Seconds the whole run may wait for locks, at most, counting the waits for a
        table's lock (C(lock_timeout), holding no row) and the tries again of the jobs set
        aside because another transaction held their row, token or task, after the other
        batches. One budget for the run, not per batch or per try, so the run ends within
        this (plus one batch's work) of its own work. The run never waits on a row, so the
        API server's writes to other jobs are not held up. Jobs still locked then are
        listed in RV(locked_jobs) and left C(Running) for a rerun.
      - V(0) tries them once more only.
      - At most V(2147483), else the option is refused before anything is done (PostgreSQL's
        C(lock_timeout) is a whole number of milliseconds that fits in 32 bits).
    type: float
    default: 10
  full_scan:
    description:
      - Read the whole C(jobs) table instead of the index on C(finished_at), to also find
        C(Running) jobs whose C(finished_at) is set. Arvados never writes such rows; a
        crash or a hand edit might. They are cleaned up like the others and listed in
        RV(running_with_finished_at).
      - The table is large on old clusters (640 MB of heap for a million jobs), so this is
        for an occasional check, not for every boot.
    type: bool
    default: false
  live:
    description:
      - Whether the API server (or any other client) uses the database while the run goes.
      - V(true) keeps the other clients' writes fast. The jobs' trigram search index takes
        new entries into a pending list; at boot the run lets it grow (see the notes), but
        an API write that found it longer than the server's C(gin_pending_list_limit) would
        merge all of it inside its own request. Live, each batch keeps the server's limit
        and merges its own entries, which makes the run slower (see C(bench/README.md)).
        Measured on 2 cores beside 40 single-row API requests a second, 100,000 jobs - an API
        update waited up to 11 s at boot speed and at most about 1 s live.
      - Live, the batches are also smaller and paced (O(batch_size), O(batch_pause)), because
        an API commit waits until all the write-ahead log (WAL) written before it is on
        disk, the run's included. Seen from C(pg_stat_activity), the API's sessions spent
        70-80% of their busy time during an unpaced run waiting for the WAL and 7-17% on the
        CPU. Batches of 1000 jobs 0.2 s apart made the p99 of the API's updates 4-12 times
        its level before the run (4-91 ms); the live defaults, 100 jobs 2 s apart, make it
        1.3-2.8 times (8-10 ms), for a run 14 times as long (100,000 jobs - 35 minutes
        instead of 2.5). A cleanup after a node reboot, a few hundred jobs at most, is done
        in seconds either way. The curve is in C(bench/README.md).
      - What else shortens those waits is on the server, for its administrator -
        C(wal_compression) (C(lz4) took the p99 during an unpaced run from 91 to 29 ms), a
        larger C(max_wal_size) (fewer checkpoints, so fewer index pages written whole to the
        WAL again), the WAL on a fast disk.
      - V(false) is for boot, when nothing else writes; the run goes at full speed.
      - V(auto) is V(true) when other sessions are connected to the database
        (C(pg_stat_activity)), as the API server's are once it runs.
    type: raw
    default: auto
  batch_pause:
    description:
      - Seconds to pause between batches, to leave the database to other clients, for
        example V(0.5). The run takes about that much longer per O(batch_size) jobs.
      - Unset, V(2) when live (see O(live)) and V(0) at boot.
      - Check mode writes nothing and does not pause.
      - At most V(86400) (a day), else the option is refused before anything is done.
    type: float
  db_wait:
    description:
      - Seconds to keep trying a database that refuses connections or does not answer, as at
        boot while PostgreSQL starts. A wrong password or a missing database fails at once.
      - At most V(86400) (a day), else the option is refused before anything is done.
    type: float
    default: 30
  cancel_slurm_jobs:
    description:
      - Make the Slurm jobs named after the jobs' UUIDs absent before the database changes,
        through the engine of M(arvados_ops.recovery.slurm_job_cancel). Only Slurm job names
        matching the job UUID pattern C(^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$) are ever considered.
      - V(auto) does so when C(squeue) is on this host (or O(squeue_path) is set); V(true)
        always (a missing C(squeue) is then an error); V(false) never.
    type: raw
    default: auto
  slurm_errors:
    description:
      - What to do when Slurm cannot be reached or a batch's Slurm jobs do not leave the queue
        within O(slurm_timeout).
      - V(fail) fails before that batch changes anything in the database; V(ignore) warns and
        goes on.
    type: str
    choices: [fail, ignore]
    default: fail
  slurm_timeout:
    description:
      - Seconds one batch may spend making its Slurm jobs absent.
      - At most V(86400) (a day), else the option is refused before anything is done.
    type: float
    default: 120
  slurm_user:
    description:
      - Only Slurm jobs of this user (the dispatcher's) are cancelled, for example V(crunch).
    type: str
  slurm_max_scancel_per_second:
    description:
      - Rate limit of C(scancel) calls.
      - At most V(1000), else the option is refused before anything is done.
    type: float
    default: 10
  slurm_max_concurrent_scancel:
    description:
      - How many C(scancel) processes may be alive at once.
      - At most V(64), else the option is refused before anything is done.
    type: int
    default: 3
  squeue_path:
    description:
      - The C(squeue) to run, for example V(/usr/bin/squeue). Default, from E(PATH).
    type: path
  scancel_path:
    description:
      - The C(scancel) to run, for example V(/usr/bin/scancel). Default, from E(PATH).
    type: path
notes:
  - Timestamps in Arvados' database are UTC; RV(threshold) is reported in UTC.
  - For its own transactions, a run raises C(gin_pending_list_limit) to 256 MB and
    C(work_mem) to 64 MB (never lowering a larger server setting), so that the trigram
    search index on C(jobs) merges its new entries a few times per run instead of once per
    batch. Until the last batch merges them, searches of jobs by text read those pending
    entries, which makes them slower while the run lasts. A run that is interrupted can
    leave them pending; the next write to C(jobs) or autovacuum merges them. Live
    (O(live)), C(gin_pending_list_limit) stays the server's.
seealso:
  - module: arvados_ops.recovery.slurm_job_cancel
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
  sample: "reboot (btime 1796040476 in /proc/stat)"
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
  description: C(Running) jobs without C(started_at); see the description for what is done with them.
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
    could_belong_to: {description: The job or pipeline instance that could own it, type: str, returned: always,
                      sample: zzzzz-8i9sb-l1813b3logug6pr}
  sample: []
log_uuids:
  description: UUIDs of the C(logs) rows written, two per job (C(dispatch) and C(update));
    empty in check mode.
  returned: always
  type: list
  elements: str
  sample: ["zzzzz-57u5n-6y0f4x4fmaz7w0e", "zzzzz-57u5n-9a0d0l1k2mxz7w1"]
counts:
  description: How many jobs were done, skipped, tokens revoked and left alone, and log rows
    written (in check mode, would be).
  returned: always
  type: dict
  sample: {"jobs": 19, "skipped_jobs": 0, "revoked_tokens": 19, "tokens_left_alone": 0, "logs": 38}
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
      description: Why Slurm was not asked (O(cancel_slurm_jobs) false, or C(auto) without C(squeue) on the host).
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
database:
  description: Where the connection settings came from (never the password).
  returned: always
  type: str
  sample: "config_file /etc/arvados/config.yml, cluster zzzzz"
diff:
  description: Each job with its state before and after.
  returned: in diff mode
  type: dict
  sample: {"before": "zzzzz-8i9sb-rx5jc1btxig25i6: Running\n", "after": "zzzzz-8i9sb-rx5jc1btxig25i6: Failed\n"}
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_run import (
    ALL_OPTIONS,
    run_fail_jobs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils.module_support import argument_spec, run_engine


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
