#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_job_cancel
short_description: Make sure no Slurm job with the given names or ids is queued
version_added: 1.0.0
description:
  - Makes the Slurm jobs named after Arvados UUIDs (or given by job id) absent from the queue,
    with the least load on C(slurmctld), and waits until they have left.
  - Containers' jobs are stopped as C(crunch-dispatch-slurm) stops them (see O(stop)) - a
    C(TERM) to the batch step, so that C(crunch-run) stops the container and records its
    outcome, then C(TERM) again every O(term_interval) seconds while the job stays. They are
    never cancelled outright unless O(after_term=cancel) asks. Other jobs, crunch v1 jobs
    among them, are cancelled.
  - A container's job still running at O(timeout), or suspended, is reported in
    RV(left_running) and RV(remaining), and the task fails so that a playbook stops there;
    nothing of it was killed.
  - Each round lists the queue with one C(squeue) for all the requested jobs and cancels
    those still queued by job id, many ids per C(scancel), pending jobs first, within a rate
    limit and a bound on C(scancel) processes alive at once. Jobs that leave on their own,
    or are already C(COMPLETING), cost no C(scancel). Only the queue decides whether a job is
    gone, never a C(scancel)'s exit status. A job Slurm refuses to this user is not tried
    again (RV(permission_denied)).
  - Nothing to cancel means C(changed=false) and no C(scancel) at all, so a rerun after a
    successful run changes nothing. When C(slurmctld) or C(munged) does not answer, the
    module keeps trying until O(timeout), then fails with Slurm's own error text and the
    jobs still queued in RV(remaining).
  - A failure no retry can mend ends the task at once, naming the setting behind it, be it C(squeue)
    or C(scancel) refusing its own command line (an unknown O(clusters) entry, an option the
    release lacks), a client that exits 1 printing nothing (C(/bin/false) as O(scancel_path)),
    or an C(squeue) listing without the header line Slurm's C(squeue) prints even for an empty
    queue (C(/bin/true) as O(squeue_path)), which is not taken for an empty queue.
    RV(cancelled) lists only jobs Slurm took the C(scancel) of, or that have left the queue.
author:
  - Arvados Ops recovery maintainers (@arvados-ops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: One C(squeue) and no C(scancel) but the C(scancel --version) with which O(ctld=auto)
      learns the release, read when a job would need one (RV(ctld) predicts the real run's);
      C(changed) is true exactly when a real run would send an C(scancel). RV(terminated), RV(cancelled) and RV(signalled) list the first
      C(scancel) each job would get; whether a job outlives its C(TERM) cannot be foreseen.
      A suspended container's job, which a real run leaves alone by default, is in
      RV(left_running) and RV(remaining) and fails the task, as it would. O(grace_period)
      is not waited for.
  diff_mode:
    support: full
    details: The queue lines (C(JOBID NAME STATE USER)) of the requested jobs before and after;
      in check mode the after side is predicted.
  platform:
    support: full
    platforms: posix
options:
  name:
    description:
      - Slurm job names to make absent, for example V(zzzzz-dz642-0123456789abcde).
      - Each must fully match O(name_pattern). Names holding a comma, whitespace or a control
        character are refused whatever the pattern, before any command runs.
      - A name that matches no queued job is reported in RV(already_absent).
    type: list
    elements: str
    aliases: [uuid]
  job_id:
    description:
      - Slurm job ids to make absent, instead of or besides O(name), for example V(['4242', '4243_7']).
      - Digits, optionally followed by V(_N) for one task of an array job; a bare array job id
        covers all its tasks.
      - With job ids the whole queue is listed and filtered by the module, because C(squeue)
        would AND C(--jobs) with C(--name).
    type: list
    elements: str
  user:
    description:
      - Only jobs of this Slurm user (as C(squeue) prints it) are cancelled, for example V(crunch).
      - Jobs of other users with a requested name or id are reported in RV(skipped_other_user),
        never cancelled and not waited for.
      - Default is to act on the jobs of every user.
    type: str
  wait:
    description:
      - Return only once the jobs have left the queue, for example V(false) to return as soon
        as Slurm has accepted every C(scancel).
      - With O(signal), wait for the signalled jobs to leave the queue; they are never signalled twice.
    type: bool
    default: true
  grace_period:
    description:
      - Seconds to let the jobs leave the queue on their own before the first C(scancel), for
        example V(5) right after a container has finished. The queue is watched meanwhile and
        jobs that leave cost no C(scancel).
      - At most V(86400) (a day).
    type: float
    default: 0
  retry_delay:
    description:
      - Seconds between an C(scancel) and the next one for a job still queued, for example V(2).
        The queue is listed again after the delay, before any new C(scancel).
      - At most V(86400) (a day).
    type: float
    default: 2
  error_retry_delay:
    description:
      - Like O(retry_delay), after an C(scancel) that failed or timed out, for example V(10).
      - At most V(86400) (a day).
    type: float
    default: 10
  timeout:
    description:
      - Deadline in seconds for the whole task, for example V(300). Jobs still queued then
        are returned in RV(remaining) and the task fails. The task never lasts longer than
        O(timeout) plus O(command_timeout).
      - Default is 120 s, plus O(terminate_grace) when a job may be sent C(TERM) first (a
        container's name, O(stop=terminate), or O(job_id)).
      - With O(after_term=cancel) and O(wait), a value not above O(terminate_grace) is
        refused when a job is sure to get C(TERM) first, as it would end the task before any
        outright cancel.
      - At most V(86400) (a day).
    type: float
  command_timeout:
    description:
      - Seconds after which one C(squeue) is killed, for example V(20). Set it to Slurm's
        C(MessageTimeout), after which the clients give up on their own.
      - An C(scancel) may take this long per ten of its job ids before it is killed (500 s for
        500 ids at the default), never past O(timeout) unless it started less than
        O(command_timeout) before it.
      - At most V(86400) (a day).
    type: float
    default: 10
  max_scancel_per_second:
    description:
      - Global rate limit on starting C(scancel) processes, for example V(2). Starts are spaced at
        least 1/O(max_scancel_per_second) seconds apart.
      - At most V(1000).
    type: float
    default: 10
  max_concurrent_scancel:
    description:
      - At most this many C(scancel) processes are alive at once, for example V(1). C(squeue)
        never runs beside them, so Slurm sees at most this many client processes of this task.
      - At most V(64).
    type: int
    default: 3
  max_job_ids_per_scancel:
    description:
      - Job ids given to one C(scancel) that sends one request per job, for example V(100).
        Keeps a failure confined to its own ids.
      - Not followed by an C(scancel --ctld) that is one request (see O(ctld)), which names up
        to 10000 ids of one kind, since it reports each job Slurm refused by its id anyway and a
        second C(scancel) only waits in C(slurmctld) behind the signals of the first. A job of
        another user, unless the task runs as root, keeps its kind of call to this many ids.
      - At most V(10000).
    type: int
    default: 500
  log_interval:
    description:
      - At most one "still in queue" warning per job per this many seconds, for example V(60).
        The first comes O(retry_delay) after the job's first C(scancel). Repeated C(squeue) or
        C(scancel) failures are limited the same way.
      - At most V(86400) (a day).
    type: float
    default: 30
  stop:
    description:
      - How a queued job is stopped, for example V(cancel) to cancel containers' jobs as well.
      - V(terminate) does what C(crunch-dispatch-slurm) does - a pending job is removed, a
        running one gets C(TERM) on its batch step only, so that C(crunch-run) can stop its
        container and save its outcome (what follows is O(after_term)'s choice). A suspended
        job is left alone and reported in RV(left_running); resume it (C(scontrol resume))
        and run the task again, or set O(after_term=cancel).
      - V(cancel) cancels every job with a plain C(scancel) - quicker, but C(crunch-run) is
        killed before it has stopped its container.
      - V(auto) terminates jobs named after a container (C(-dz642-)) and cancels the others;
        jobs given by O(job_id) are judged by their name.
      - Ignored with O(signal); O(signal) with V(terminate) or V(cancel) is an error.
    type: str
    choices: [auto, terminate, cancel]
    default: auto
  after_term:
    description:
      - What a job that O(stop) terminates gets while it stays queued after its C(TERM), for
        example V(cancel) to have it killed after O(terminate_grace). Without O(wait) neither
        applies; the task returns after the first C(TERM).
      - V(term_again) does what C(crunch-dispatch-slurm) does - C(TERM) again every
        O(term_interval) seconds until the job leaves or O(timeout). A job still there then,
        or suspended, is reported in RV(left_running), not cancelled, and the task fails.
      - V(cancel) cancels a job still queued O(terminate_grace) seconds after its C(TERM), and
        a suspended one at once, killing C(crunch-run) before it has stopped its container;
        with Docker the container outlives the job and its output and logs are lost. Only
        for jobs that must go whatever it costs.
    type: str
    choices: [term_again, cancel]
    default: term_again
  term_interval:
    description:
      - With O(after_term=term_again), seconds between the C(TERM)s of a job that stays
        running, for example V(30). The next C(TERM) goes once a listing that began this long
        after the last one still shows the job running.
      - The default, 10 s, is the dispatcher's, which sends C(TERM) again once per C(squeue)
        poll.
      - At least V(1) and at most V(3600).
    type: float
    default: 10
  terminate_grace:
    description:
      - Seconds C(crunch-run) is given to stop its container after Slurm took its C(TERM), for
        example V(300) where containers take long to save their output.
      - With O(after_term=cancel), a job still queued this long after its C(TERM) is cancelled
        outright. With O(after_term=term_again) it only lengthens the default O(timeout).
      - The default, 120 s, is what Arvados' cloud dispatcher gives C(crunch-run)
        (C(Containers.CloudVMs.TimeoutTERM)).
      - At most V(86400) (a day).
    type: float
    default: 120
  signal:
    description:
      - Send this signal instead of stopping the jobs, for example V(TERM), V(SIGUSR1) or
        V(15) - a name C(scancel) knows, with or without C(SIG) (V(HUP), V(INT), V(QUIT),
        V(ABRT), V(KILL), V(ALRM), V(TERM), V(USR1), V(USR2), V(URG), V(CONT), V(STOP),
        V(TSTP), V(TTIN), V(TTOU), V(XCPU)), or a number from 1 to 64.
      - Running and suspended jobs are signalled, each once (a failed delivery is tried again
        after O(error_retry_delay)); pending jobs cannot take a signal and are reported in
        RV(skipped_pending), then signalled if they start while the task waits (see O(wait)).
        O(stop) and O(after_term) must be left at their defaults.
    type: str
  batch:
    description:
      - With O(signal), signal only the batch shell and its children (C(scancel --batch)), not the
        job's other steps, for example V(true) to let C(crunch-run) clean up as the dispatcher does.
    type: bool
    default: false
  clusters:
    description:
      - Slurm clusters to act on (C(--clusters), that is C(-M)), for example V(east) or V(east,west).
      - From Slurm 24.05 on, C(scancel --clusters) takes the O(ctld) path by itself.
    type: str
  ctld:
    description:
      - Whether each C(scancel) carries C(--ctld), for example V(never) to keep one request per
        job on a site whose C(slurmctld) is older than its clients.
      - From Slurm 24.05 on, C(scancel --ctld) with job ids sends C(slurmctld) one request
        (C(REQUEST_KILL_JOBS)) for all of them, where every other form reads the whole queue
        and sends one request per job, ten at a time. The stop keeps its three kinds of call
        (pending jobs removed with C(--state=PENDING), running ones sent C(--batch --signal=TERM),
        others cancelled), each then one request, naming up to 10000 ids whatever
        O(max_job_ids_per_scancel) says.
      - V(auto) asks C(scancel --version) once per task, beside the first C(squeue) (it talks to no
        daemon; its answer is used only when an C(scancel) is due), and uses
        C(--ctld) on 24.05 and later (RV(scancel_version), RV(ctld)); an answer that names no
        release means no C(--ctld). On older releases C(--ctld) only routes each job's request
        through C(slurmctld), which is why V(auto) leaves it off there.
      - V(always) gives C(--ctld) whatever the release; V(never) never does.
      - Either way a job of another user is only named to C(scancel --ctld) when the task runs
        as root - from 24.05 to at least 25.11 C(slurmctld) deadlocks when a user neither root
        nor the job's owner sends it C(--ctld) for it on a cluster without an accounting
        database (reproduced on Debian 13's 24.11.5). Such jobs get one request each, and a
        warning says so.
      - An C(scancel --ctld) exits 0 whatever Slurm said of each job; the jobs it reports as
        not signalled are tried again after O(error_retry_delay), those refused to this user
        are reported in RV(permission_denied), as without C(--ctld).
    type: str
    choices: [auto, always, never]
    default: auto
  name_pattern:
    description:
      - Regular expression every O(name) must match in full, for example V(^[0-9a-z]{5}-dz642-[0-9a-z]{15}$)
        for containers only or V(^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$) for crunch v1 jobs.
      - The default accepts any Arvados UUID.
      - The names are matched before any command runs, within O(timeout) - a pattern that
        backtracks without end (nested repeats such as V((a+\)+$)) fails the task then, naming
        the pattern and the name, with nothing asked of Slurm.
    type: str
    default: ^[0-9a-z]{5}-[0-9a-z]{5}-[0-9a-z]{15}$
  squeue_path:
    description:
      - Path of C(squeue), for example V(/opt/slurm/bin/squeue). Default is C(squeue) found in the
        remote C(PATH) and the sbin directories; the task fails at once if there is none.
    type: path
  scancel_path:
    description:
      - Path of C(scancel), for example V(/opt/slurm/bin/scancel). Default is C(scancel) found in
        the remote C(PATH) and the sbin directories.
    type: path
notes:
  - Every option is checked before any command runs; a bad value is refused with a message
    naming the option.
  - Commands run as argument lists, never through a shell, with C(LC_ALL=C); the C(SQUEUE_*)
    and C(SCANCEL_*) environment variables, which would change what the clients list or
    cancel, are removed.
  - C(scancel) is given job ids, never C(--name), which takes a single name and cancels every job
    of that name whoever owns it.
  - Point the Slurm clients at the cluster with C(SLURM_CONF) in the task's C(environment) if
    C(/etc/slurm/slurm.conf) is not the right file.
seealso:
  - module: arvados_ops.recovery.arvados_reconcile_info
  - module: arvados_ops.recovery.arvados_fail_jobs
  - name: How containers' jobs are stopped
    description: The dispatcher's way, what each choice costs, with Arvados' and Slurm's sources.
    link: https://github.com/arvados-ops/recovery/blob/main/README.md#what-slurm_job_cancel-does
  - name: Benchmarks
    description: Client processes and time against scancel alone and the dispatcher's loop.
    link: https://github.com/arvados-ops/recovery/blob/main/bench/README.md#slurm_job_cancel
  - name: scancel manual
    description: Options of Slurm's scancel.
    link: https://slurm.schedmd.com/scancel.html
"""

EXAMPLES = r"""
- name: Make sure the Slurm jobs of these containers are gone
  arvados_ops.recovery.slurm_job_cancel:
    name:
      - zzzzz-dz642-0123456789abcde
      - zzzzz-dz642-0123456789abcdf
    user: crunch

- name: Let just-finished containers leave on their own for 5 s first
  arvados_ops.recovery.slurm_job_cancel:
    uuid: "{{ finished_container_uuids }}"
    name_pattern: ^[0-9a-z]{5}-dz642-[0-9a-z]{15}$
    grace_period: 5
    timeout: 300

- name: Stop containers as the dispatcher does, TERM every 10 s for up to 10 minutes
  arvados_ops.recovery.slurm_job_cancel:
    name:
      - zzzzz-dz642-0123456789abcde
      - zzzzz-8i9sb-0123456789abcde
    timeout: 600
  register: stopped
  ignore_errors: true

- name: Show which containers did not stop on their TERMs (left running, not cancelled)
  ansible.builtin.debug:
    msg: "{{ stopped.left_running }}"

- name: Cancel outright the containers still queued 60 s after their TERM (crunch-run killed)
  arvados_ops.recovery.slurm_job_cancel:
    name: zzzzz-dz642-0123456789abcde
    after_term: cancel
    terminate_grace: 60

- name: Send crunch-run its TERM only, without waiting or ever cancelling
  arvados_ops.recovery.slurm_job_cancel:
    name: zzzzz-dz642-0123456789abcde
    signal: TERM
    batch: true
    wait: false

- name: Cancel containers' jobs outright, as a plain scancel would
  arvados_ops.recovery.slurm_job_cancel:
    name: zzzzz-dz642-0123456789abcde
    stop: cancel

- name: Cancel by job id on one cluster, gently
  arvados_ops.recovery.slurm_job_cancel:
    job_id: ["4242", "4243_7"]
    clusters: east
    max_scancel_per_second: 1
    max_concurrent_scancel: 1
  environment:
    SLURM_CONF: /etc/slurm/east.conf
"""

RETURN = r"""
cancelled:
  description:
    - Jobs cancelled outright (in check mode, that would be), with their state when first seen, by a
      plain C(scancel) or, for a pending job, its removal.
    - With O(after_term=cancel), a job sent C(TERM) first is also here if it was still queued
      O(terminate_grace) seconds later, and so is a suspended container's job.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-8i9sb-0123456789abcde", "job_id": "4241", "state_before": "RUNNING", "user": "crunch"}]
terminated:
  description:
    - Jobs sent C(TERM) on their batch step as O(stop) says (in check mode, that would be); same keys as
      RV(cancelled).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4242", "state_before": "RUNNING", "user": "crunch"}]
signalled:
  description: With O(signal), the jobs the signal was sent to (in check mode, would be sent to); same keys as RV(cancelled).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4242", "state_before": "RUNNING", "user": "crunch"}]
already_absent:
  description: Requested names never seen in the queue.
  returned: always
  type: list
  elements: str
  sample: ["zzzzz-dz642-0123456789abcdf"]
already_absent_job_ids:
  description: Requested job ids never seen in the queue.
  returned: always
  type: list
  elements: str
  sample: ["4243_7"]
skipped_other_user:
  description: Queued jobs with a requested name or id that belong to another user than O(user); left alone.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4250", "state": "PENDING", "user": "alice"}]
skipped_pending:
  description: With O(signal), pending jobs that could not take the signal.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4251", "state": "PENDING", "user": "crunch"}]
remaining:
  description:
    - Jobs still queued when the task gave up. V(job_id) is null and V(state) is V(UNKNOWN) when the
      queue could never be listed.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4242", "state": "COMPLETING", "user": "crunch"}]
left_running:
  description:
    - Jobs that O(stop) terminates still running (or suspended) when the task ended, left so as
      O(after_term=term_again) says, never cancelled. They are in RV(remaining) too and fail the task.
    - V(terms) is how many C(TERM)s Slurm took for the job; 0 for a suspended job, which no C(TERM)
      reaches. In check mode, only the suspended jobs, which a real run would certainly leave.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4242", "state": "RUNNING", "user": "crunch", "terms": 24}]
permission_denied:
  description:
    - Jobs Slurm refused to cancel or signal for the user the task runs as ("Access/permission
      denied"; another user's jobs, unless the task runs as root, C(SlurmUser) or an operator). They
      get no further C(scancel), are in RV(remaining) too and fail the task; the task ends as soon as
      only such jobs are left, not at O(timeout). Check mode cannot foresee them.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "zzzzz-dz642-0123456789abcde", "job_id": "4250", "state": "PENDING", "user": "alice"}]
scancel_calls:
  description: Number of C(scancel) processes that asked Slurm to cancel or signal jobs (not the
    C(scancel --version) of O(ctld=auto)).
  returned: always
  type: int
  sample: 1
ctld:
  description: Whether the C(scancel) calls carried C(--ctld) (see O(ctld)); null when no
    C(scancel) was needed.
  returned: always
  type: bool
  sample: true
scancel_version:
  description: The Slurm release C(scancel --version) named, major and minor, when O(ctld) asked
    it; empty otherwise.
  returned: always
  type: str
  sample: "24.11"
squeue_calls:
  description: Number of C(squeue) processes started.
  returned: always
  type: int
  sample: 3
elapsed:
  description: Seconds the task took.
  returned: always
  type: float
  sample: 0.162
messages:
  description: The "still in queue" and Slurm error messages, also shown as warnings.
  returned: always
  type: list
  elements: str
  sample:
    - "Slurm job 4242 (zzzzz-dz642-0123456789abcde) still in queue, COMPLETING, 2.1 s into the call"
    - "1 Slurm job(s) still running 10 s after their TERM, sent TERM again (every 10 s until they leave or the
      timeout; never cancelled outright, after_term=term_again): 4242"
slurm_error:
  description: The last error text of C(squeue) or C(scancel) that was not followed by a success; empty if none.
  returned: always
  type: str
  sample: "squeue: error: Unable to contact slurm controller (connect failure)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.run import (
    CANCEL_OPTIONS,
    run_slurm_job_cancel,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import argument_spec
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules.support import run_slurm_module

# The engine's CancelRequest holds the defaults; DOCUMENTATION must repeat them (ansible-doc
# reads it as text), and the unit tests hold the two together.
ARGUMENT_SPEC = argument_spec(CANCEL_OPTIONS)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_one_of=[("name", "job_id")],
        required_if=[("batch", True, ("signal",))],
        supports_check_mode=True,
    )
    run_slurm_module(module, run_slurm_job_cancel, CANCEL_OPTIONS)


if __name__ == "__main__":
    main()
