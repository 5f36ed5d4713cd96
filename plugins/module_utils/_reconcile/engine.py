# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reconciling Slurm's queue with Arvados' database: the decisions, without I/O.

Pure Python (3.8+), standard library only. ``_reconcile.run`` feeds these classes
with two squeue listings and the database rows; the tests feed them fakes.

The rules, and the Arvados source they follow:

* A Slurm job is the cluster's when its name is a crunch v1 job UUID
  (``<prefix>-8i9sb-...``) or a container UUID (``<prefix>-dz642-...``) of the
  cluster's prefix: crunch-dispatch.rb ran each job under ``salloc --job-name=<uuid>``,
  crunch-dispatch-slurm submits ``--job-name=<uuid>`` and, in
  ``checkSqueueForOrphans``, only looks at names matching
  ``^[a-z0-9]{5}-dz642-[a-z0-9]{15}$`` (1.4.3 to 3.2.1); that they start with its ClusterID
  it checks from 2.1.2 and 2.2.0 on (2.0.0 to 2.1.1 took any cluster's)
  (services/crunch-dispatch-slurm/crunch-dispatch-slurm.go).
* *Stray*: a Slurm job of the cluster whose job is neither ``Running`` nor ``Queued``,
  whose container is ``Queued``, ``Complete`` or ``Cancelled`` or has priority 0.
  crunch-dispatch-slurm cancels exactly such container jobs (``runContainer``: the
  tracker closed, which sdk/go/dispatch/dispatch.go does on ``Queued``, ``Cancelled`` and
  ``Complete``, or priority 0; lib/dispatchcloud/scheduler/sync.go likewise kills the work
  of a ``Queued`` container; 2.7.4 and 3.2.1); one whose container became final while no
  dispatcher ran it reaps only when it starts. Jobs already ``COMPLETING`` are ending and
  are not listed.
* *Ending*: the Slurm job of a crunch v1 job that is neither ``Running`` nor ``Queued``
  but whose row was modified less than 60 s before the read (the database's clock) is not
  stray: crunch-job is still cancelling its tasks and saving its log, and
  crunch-dispatch.rb's ``check_orphaned_slurm_jobs`` spares exactly those
  (1.4.3:services/api/lib/crunch_dispatch.rb:892-896, ``modified_at > Time.now - 60``). They
  are reported as ending (``jobs_ending``), with their age. Containers have no such rule:
  crunch-dispatch-slurm cancels at once when the tracker closes.
* *Missing from the database*: a Slurm job named after a UUID of the cluster that the
  database lacks. For crunch v1 jobs it is stray by default, as crunch-dispatch.rb cancels
  it (1.4.3:services/api/lib/crunch_dispatch.rb:892-900: ``squeue_uuids`` minus the UUIDs
  found in ``jobs``). For containers Arvados leaves it alone (``TrackContainer``'s GET
  fails and nothing is cancelled, 2.7.4 and 3.2.1
  services/crunch-dispatch-slurm/crunch-dispatch-slurm.go ``checkSqueueForOrphans``). The
  caller may say otherwise for both kinds (``missing_are_stray``): read from a lagging
  replica or the wrong database, such a job is live work.
* *Orphaned*: a live record (job ``Running``; container ``Locked`` or ``Running``,
  services/api/app/models/container.rb ``State_transitions``) with no Slurm job of its
  name in two listings at least ``settle`` seconds apart, and its row not updated since
  the first read (the same row version, PostgreSQL's ``xmin``) when read again as the
  second listing is taken. A job submitted between the listings is in the second one and
  never reported; a record something updated meanwhile (a new state, a restart, another
  lock, or progress written by a process still at work) is not reported either.
* A ``Locked`` container whose ``modified_at`` is within ``orphan_grace`` seconds before
  the first read (the database's clock) is never orphaned. No dispatcher has such a rule
  for orphans; the grace stands for the dispatcher's own delay: crunch-dispatch-slurm
  locks a container, then waits for its next squeue poll before it submits it
  (3.2.1:services/crunch-dispatch-slurm/crunch-dispatch-slurm.go:269-273 and
  squeue.go:43-52, ``HasUUID`` blocks until the next poll; ``CloudVMs.PollInterval``,
  10 s by default, may be set longer than ``settle``), so a container locked just before
  the first read may rightly have no Slurm job yet. A ``Running`` container or crunch v1
  job gets no grace: crunch-run and crunch-job set ``Running`` from inside their Slurm
  job, so it existed first; crunch-dispatch.rb's 60 s is a rule about strays (above).
* A crunch v1 job ``Running`` without a Slurm job is not orphaned while crunch-dispatch.rb
  may still run: when crunch-job exits 93 (its nodes failed) the dispatcher keeps the job
  ``Running``, without a Slurm job and without updating its row, in ``@todo_job_retries``
  until idle nodes return ("Only this crunch-dispatch process can retry the job",
  ``reap_children``, 1.4.3 crunch_dispatch.rb). Such jobs are *awaiting retry* unless the
  caller has evidence that crunch-dispatch.rb is stopped (:data:`V1_DISPATCHER_EVIDENCE`).
* A job awaiting retry longer than ``retry_overdue_after`` (its age: since ``modified_at``,
  by the database's clock) is *overdue*: ``@todo_job_retries`` lives in crunch-dispatch.rb's
  memory only (1.4.3:services/api/lib/crunch_dispatch.rb:50), so one that was restarted
  (or killed: a clean stop fails them, lines 838-845) has forgotten the job and never
  retries it. See :data:`DEFAULT_RETRY_OVERDUE_AFTER` for the default.
* Absence from Slurm means orphaned only with evidence that the kind runs under this
  Slurm (see :data:`ORPHAN_RULES`): a cluster whose crunch v1 jobs never ran under Slurm,
  or a squeue that sees another Slurm cluster, would otherwise call every live
  record orphaned.
"""

from __future__ import annotations

import operator
import re
from collections import deque
from itertools import chain, compress, repeat
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Match,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from .._common.errors import ConfigError
from .._common.uuids import CONTAINER_INFIX, JOB_INFIX, check_prefix
from .._slurm.queue import FINISHED_STATES, LEAVING_STATES, SlurmJob

JOBS = "jobs"
CONTAINERS = "containers"
KINDS = (JOBS, CONTAINERS)
# The one word for one record of a kind: the `kind` of a report entry and the watch's
# `kind` label, where the options and the result's keys name the kinds in the plural.
ENTRY_KIND = {JOBS: "job", CONTAINERS: "container"}
INFIX_OF = {JOBS: JOB_INFIX, CONTAINERS: CONTAINER_INFIX}
KIND_OF_INFIX = {infix: kind for kind, infix in INFIX_OF.items()}

# States in which a record needs its Slurm job (container.rb State_transitions; the
# crunch v1 job model's Running).
LIVE_STATES = {JOBS: ("Running",), CONTAINERS: ("Locked", "Running")}
# Job states that keep a Slurm job wanted; containers: states that make it unwanted (the
# dispatcher's tracker closes on them: 3.2.1 sdk/go/dispatch/dispatch.go).
JOB_STATES_WANTING_SLURM = ("Running", "Queued")
CONTAINER_STATES_CLOSING_THE_TRACKER = ("Queued", "Complete", "Cancelled")

# For Locked containers only (see the module's docstring): six of crunch-dispatch-slurm's
# default squeue polls between its lock and its sbatch; past an hour a grace hides real
# orphans: a typo.
DEFAULT_ORPHAN_GRACE = 60.0
MAX_ORPHAN_GRACE = 3600.0
GRACE_STATES = ("Locked",)
# 1.4.3:services/api/lib/crunch_dispatch.rb:892-896: check_orphaned_slurm_jobs keeps the
# Slurm job of a job `modified_at > (Time.now - 60)`, whatever its state. Not an option:
# crunch-dispatch.rb has no setting for it.
V1_ENDING_SECONDS = 60.0

# How long a job may await crunch-dispatch.rb's retry before it is overdue. 1.4.3
# services/api/lib/crunch_dispatch.rb: the retry list is tried every second (refresh_todo
# and start_jobs, lines 822-826, 61) as soon as an idle node fits (nodes_available_for_job_now,
# 152-199, node states refreshed every second, 823); with none, it holds off up to 5 minutes
# for Node Manager (214-218, `@node_wait_deadline = Time.now + 5.minutes`), and after
# RETRY_UNLOCKED_LIMIT = 3 interruptions it fails the job (15, 684-706). So RETRY_UNLOCKED_LIMIT
# such waits, 15 minutes, is the longest its own timing keeps a job it remembers waiting;
# longer, it has most likely forgotten it (a restart) or has no node at all to give it,
# and either way someone should look. A day bounds the option: past it nothing waits.
RETRY_UNLOCKED_LIMIT = 3
NODE_WAIT_SECONDS = 300.0
DEFAULT_RETRY_OVERDUE_AFTER = RETRY_UNLOCKED_LIMIT * NODE_WAIT_SECONDS

RUNNING = "running"
STOPPED = "stopped"
UNKNOWN = "unknown"
# What the caller knows of crunch-dispatch.rb, and why a crunch v1 job Running without a
# Slurm job is then awaiting its retry rather than orphaned (None: it is orphaned).
V1_DISPATCHER_EVIDENCE = {
    RUNNING: "crunch-dispatch.rb runs and may retry it",
    STOPPED: None,
    UNKNOWN: "no evidence whether crunch-dispatch.rb runs (crunch_v1_dispatcher: unknown)",
}

EVIDENCE = "evidence"
ALWAYS = "always"
NEVER = "never"
ORPHAN_RULES = {
    EVIDENCE: "orphans of a kind are reported only when the second listing shows at least "
    "one live record of that kind with its Slurm job",
    ALWAYS: "orphans are reported even when Slurm shows none of the cluster's work",
    NEVER: "orphans are never reported",
}


class Record(NamedTuple):
    """One job or container row, as far as reconciling needs it."""

    uuid: str
    state: Optional[str]
    # ISO 8601 text, as the database wrote it (Arvados' timestamps are UTC without zone).
    started_at: Optional[str]
    locked_by_uuid: Optional[str]
    priority: Optional[int]
    # Live, yet finished_at is set: an inconsistent row (the re-read looks it up by UUID).
    finished: bool = False
    # modified_at within the orphan grace before the read (the database's clock); only a
    # Locked container's counts (GRACE_STATES).
    recent: bool = False
    # Seconds from modified_at to the read, by the database's clock (negative when
    # modified_at is ahead of it); None when modified_at is NULL.
    age: Optional[float] = None
    # The row's version (xmin, as text): any update of the row gives it another, so an
    # equal version read again means the very row of the first read, every column alike.
    version: Optional[str] = None


# A live record as the first read yields it: a tuple in Record's field order, which
# unpacks as a Record does (a Record made of each row was a measurable share of the read:
# bench/README.md, arvados_reconcile_info).
LiveRow = Sequence[Any]
uuid_of = operator.itemgetter(0)
# A Record's last field, or the second of a (UUID, version) pair.
version_of = operator.itemgetter(-1)
is_finished = operator.itemgetter(Record._fields.index("finished"))
is_recent = operator.itemgetter(Record._fields.index("recent"))
# Not a version: a record the re-read did not find is never confirmed, whatever its own.
_ABSENT = object()
# Rows of the re-read made Python tuples at a time: the candidates' versions are compared
# chunk by chunk, never all held at once.
REREAD_CHUNK_ROWS = 2000


class VersionsText:
    """The unfinished live rows of a kind read again as two texts: their UUIDs and their
    versions, each joined by commas in the order the server read them (_reconcile.db).
    Where that is the first read's order (both follow the table), one comparison of two
    texts confirms every row: 100,000 rows made tuples cost 30 ms more than the whole
    comparison. Arvados makes its UUIDs of [0-9a-z] and dashes, and a version is a
    number: neither holds a comma."""

    __slots__ = ("uuids", "versions")

    def __init__(self, uuids: str, versions: str) -> None:
        self.uuids = uuids
        self.versions = versions

    def spells(self, uuids: str, versions: str, rows: int) -> bool:
        """Whether these are the texts of exactly these `rows` rows, in this order (texts
        joined as the server joins them: Candidates.read_texts)."""
        # As many commas as separators: no UUID of the first read holds one, so equal
        # texts are equal lists, and the server's rows are those very rows.
        return uuids.count(",") == rows - 1 and uuids == self.uuids and versions == self.versions

    def pair_chunks(self) -> Iterator[List[Tuple[str, str]]]:
        """The (UUID, version) pairs, REREAD_CHUNK_ROWS at a time; none if a UUID held a
        comma after all: its rows cannot be told apart, so none of them confirms a
        candidate (an orphan unreported rather than one wrongly reported)."""
        uuids = self.uuids.split(",")
        versions = self.versions.split(",")
        if len(uuids) != len(versions):
            return
        pairs = list(zip(uuids, versions))
        for start in range(0, len(pairs), REREAD_CHUNK_ROWS):
            yield pairs[start : start + REREAD_CHUNK_ROWS]


# What the re-read gives, chunk by chunk: (UUID, version) pairs, or a VersionsText.
ReadAgain = Union[Sequence[Sequence[Any]], VersionsText]


class Listing:
    """The cluster's Slurm jobs in one squeue output, by name; nothing else is kept, so
    memory follows the queue, not the database."""

    def __init__(self, by_name: Dict[str, List[SlurmJob]], other_clusters: int) -> None:
        self.by_name = by_name
        self.other_clusters = other_clusters

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def names(self, kind: str) -> List[str]:
        return [name for name in self.by_name if kind_of(name) == kind]

    def count(self) -> int:
        return sum(len(jobs) for jobs in self.by_name.values())


def kind_of(name: str) -> Optional[str]:
    return KIND_OF_INFIX.get(name[6:11]) if len(name) == 27 else None


def name_matcher(prefix: Optional[str], kinds: Iterable[str]) -> Callable[[str], Optional[Match[str]]]:
    """A test for 'this Slurm job name is a UUID of one of `kinds`', of the cluster
    `prefix` (None: of any cluster). Exact patterns: `^...-8i9sb-[0-9a-z]{15}$`."""
    infixes = "|".join(INFIX_OF[kind] for kind in kinds)
    cluster = check_prefix(prefix) if prefix is not None else "[0-9a-z]{5}"
    return re.compile(r"%s-(?:%s)-[0-9a-z]{15}\Z" % (cluster, infixes)).match


def listing_of(jobs: Iterable[SlurmJob], prefix: str, kinds: Sequence[str]) -> Listing:
    """The cluster's jobs of `kinds` among those squeue listed (queue.read_listing of
    JOB_NODES_LISTING), by name; the other clusters' Arvados jobs only counted."""
    ours = name_matcher(prefix, kinds)
    any_arvados = name_matcher(None, kinds)
    by_name: Dict[str, List[SlurmJob]] = {}
    other_clusters = 0
    for job in jobs:
        if job.state in FINISHED_STATES:
            continue
        if ours(job.name):
            by_name.setdefault(job.name, []).append(job)
        elif any_arvados(job.name):
            other_clusters += 1
    return Listing(by_name, other_clusters)


def missing_reason(kind: str) -> str:
    if kind == JOBS:
        return (
            "no job of this UUID in the database: crunch-dispatch.rb cancels such a Slurm job "
            "(check_orphaned_slurm_jobs); read from a lagging replica or the wrong database it is live work"
        )
    return (
        "no container of this UUID in the database: Arvados leaves such a Slurm job alone (its "
        "tracker's GET fails); read from a lagging replica or the wrong database it is live work"
    )


def is_ending(kind: str, record: Record) -> bool:
    """Whether a crunch v1 job's Slurm job, though unwanted by its state, is still ending
    (crunch-job saving its work): modified less than V1_ENDING_SECONDS ago. A NULL
    modified_at is never recent, as `modified_at > ?` is not true for it in SQL."""
    return kind == JOBS and record.age is not None and record.age < V1_ENDING_SECONDS


def ending_reason(record: Record) -> str:
    return (
        "job is %s, modified %.1f s ago: crunch-job is still saving its work, and crunch-dispatch.rb "
        "never cancels the Slurm job of a job modified in the last %g s; stray after that"
        % (record.state, record.age or 0.0, V1_ENDING_SECONDS)
    )


def stray_reason(kind: str, record: Record) -> Optional[str]:
    """Why a Slurm job named after this record should not be in the queue, or None."""
    if kind == JOBS:
        if record.state not in JOB_STATES_WANTING_SLURM:
            return "job is %s: only Running and Queued jobs have a Slurm job" % record.state
        return None
    if record.state in CONTAINER_STATES_CLOSING_THE_TRACKER:
        return "container is %s: crunch-dispatch-slurm's tracker closes and cancels its Slurm job" % record.state
    if record.priority == 0:
        return "container has priority 0 (no request wants it): crunch-dispatch-slurm cancels its Slurm job"
    return None


class Candidates(dict):
    """Row versions by UUID (Record.version), in the order read, and the UUIDs among them
    read live with finished_at set (`inconsistent`): the re-read's scan of the unfinished
    rows cannot see those, so they are read again by UUID.

    What the run keeps of each live record once its report entry is made: the version
    string alone, where a whole Record was four objects (100,000s of them, 25 MiB at
    1,000,000 jobs, and 30-50 ms to free at the end of the run).

    And the UUIDs and versions of the unfinished ones in the order read (`read_uuids`,
    `read_versions`), which the caller fills: the re-read's scan of those rows usually
    gives them in the same order (both follow the table), so that `unconfirmed` can
    compare them whole, in C: as texts (`read_texts`, against a VersionsText), or list to
    list."""

    def __init__(self) -> None:
        super().__init__()
        self.inconsistent: List[str] = []
        self.read_uuids: List[str] = []
        self.read_versions: List[str] = []
        # The same, joined by commas a chunk at a time (as VersionsText compares them):
        # joined as the rows come, the texts are in the processor's caches; joined all at
        # once on the run's path, after the sort, each UUID was a cache miss.
        self._uuid_texts: List[str] = []
        self._version_texts: List[str] = []

    def add_rows(self, rows: Sequence[LiveRow]) -> None:
        """Takes the versions of these live rows, as they come (a chunk of the first read)."""
        uuids = list(map(uuid_of, rows))
        versions = list(map(version_of, rows))
        self.update(zip(uuids, versions))
        finished_flags = list(map(is_finished, rows))
        if any(finished_flags):
            self.inconsistent.extend(compress(uuids, finished_flags))
            unfinished = list(map(operator.not_, finished_flags))
            uuids = list(compress(uuids, unfinished))
            versions = list(compress(versions, unfinished))
        self.read_uuids.extend(uuids)
        self.read_versions.extend(versions)
        if uuids:
            self._uuid_texts.append(",".join(uuids))
            self._version_texts.append(",".join(versions))

    def read_texts(self) -> Tuple[str, str]:
        """`read_uuids` and `read_versions`, each joined by commas."""
        return ",".join(self._uuid_texts), ",".join(self._version_texts)


def inconsistent_of(candidates: Mapping[str, Any]) -> List[str]:
    """The UUIDs of the candidates read live with finished_at set: a Candidates keeps them;
    a mapping of UUIDs to Records says it record by record."""
    if isinstance(candidates, Candidates):
        return [uuid for uuid in candidates.inconsistent if uuid in candidates]
    return list(map(uuid_of, filter(is_finished, candidates.values())))


class OrphanSearch:
    """The live records of one kind without a Slurm job, narrowed poll by poll.

    It starts from the versions of every live record of the kind (`versions`, a Candidates
    it takes over: the caller fills it as the rows come, while the server still scans;
    built after the read, 100,000 records cost 20-30 ms more); only those absent from the
    first listing are kept, with their row version for the re-read. Those modified within
    the orphan grace (among `spared`, the records read with `recent` set) are set aside
    (never orphaned, never read again), yet a Slurm job of theirs in the second listing
    still counts as evidence.
    """

    def __init__(self, kind: str, versions: Candidates, spared: Iterable[Record], first: Listing) -> None:
        self.kind = kind
        # How many live records of the kind were read.
        self.record_count = len(versions)
        # Only Locked containers have a grace (the module's docstring), whatever the rows say.
        self.recent: Set[str] = {record.uuid for record in spared if record.state in GRACE_STATES}
        # The few listed ones taken out: a filtering comprehension took twice as long.
        self.candidates = versions
        listed = [name for name in first.by_name if name in self.candidates]
        for uuid in listed:
            del self.candidates[uuid]
        self.with_slurm_job = len(listed)
        self.recent.difference_update(listed)
        for uuid in self.recent:
            del self.candidates[uuid]

    def drop_present(self, second: Listing) -> List[str]:
        """Drops the candidates the second listing shows; returns their UUIDs."""
        candidates = self.candidates
        present = [name for name in second.by_name if name in candidates]
        for uuid in present:
            del candidates[uuid]
        recent_present = [name for name in second.by_name if name in self.recent]
        self.recent.difference_update(recent_present)
        self.with_slurm_job += len(present) + len(recent_present)
        return present

    def withheld_reason(self, rule: str) -> Optional[str]:
        """Why orphans of this kind are not reported under `rule`, or None."""
        if rule == NEVER:
            return "orphans: never"
        if rule == EVIDENCE and self.with_slurm_job == 0 and self.candidates:
            return (
                "Slurm shows no Slurm job for any of the %d live %s: absence from this "
                "Slurm proves nothing (they may never have run under it, or squeue sees "
                "another cluster); orphans: always reports them anyway" % (self.record_count, self.kind)
            )
        return None


def unconfirmed(candidates: Mapping[str, Any], chunks: Iterable[ReadAgain]) -> Set[str]:
    """The UUIDs of the `candidates` (UUID -> version of the first read) whose row, read
    again after the second listing, has not that version: `chunks` are lists of the
    (UUID, version) pairs read again, or VersionsTexts, as they come (a row not among them
    is gone, or no longer live). Each UUID comes at most once: uuid is unique, and a row
    the re-read finds both by its scan and by UUID (_reconcile.db) has another version than
    the first read's.

    While the chunks hold exactly the unfinished rows of the first read in its order, with
    their versions (a Candidates' `read_uuids` and `read_versions`: the usual case, as both
    reads follow the table), they are compared text to text or list to list, in C, and
    every candidate among them is confirmed at once; from the first chunk that differs on
    (a row updated, gone or new, or another order), the confirmed ones are taken out of a
    copy of `candidates`
    chunk by chunk: no mapping of every version read again is built (20-28 MiB and 30-50 ms
    for 100,000 rows), and the look-ups follow the copy's own order, which keeps them in
    the processor's caches (in UUID order they took three times as long).
    """
    matched, rest = _read_again_in_order(candidates, chunks)
    uuids = getattr(candidates, "read_uuids", [])
    if uuids and matched == len(uuids):
        # Every candidate is confirmed but those read live with finished_at set (read
        # again by UUID, in the chunks left).
        left = {uuid: candidates[uuid] for uuid in inconsistent_of(candidates)}
    else:
        left = dict(candidates)
        deque(map(left.pop, uuids[:matched], repeat(None)), maxlen=0)
    for chunk in rest:
        # Iterated in C (map, compress): a comprehension took half the time again.
        same = map(operator.eq, map(left.get, map(uuid_of, chunk), repeat(_ABSENT)), map(version_of, chunk))
        deque(map(left.pop, compress(map(uuid_of, chunk), same)), maxlen=0)
    return set(left)


def _read_again_in_order(
    candidates: Mapping[str, Any], chunks: Iterable[ReadAgain]
) -> Tuple[int, Iterator[Sequence[Sequence[Any]]]]:
    """How many of the first read's unfinished rows (a Candidates' `read_uuids`, none for
    another mapping) the chunks give first, in that order and each with its version; and
    the chunks, as (UUID, version) pairs, from the first that does not."""
    chunks = iter(chunks)
    uuids: List[str] = getattr(candidates, "read_uuids", [])
    versions: List[str] = getattr(candidates, "read_versions", [])
    first = next(chunks, None)
    if first is None:
        return 0, iter([])
    if (
        isinstance(first, VersionsText)
        and isinstance(candidates, Candidates)
        and uuids
        and first.spells(*candidates.read_texts(), len(uuids))
    ):
        return len(uuids), _as_pairs(chunks)
    chunks = _as_pairs(chain((first,), chunks))
    if not uuids:
        return 0, chunks
    matched = 0
    for chunk in chunks:
        end = matched + len(chunk)
        if list(map(uuid_of, chunk)) != uuids[matched:end]:
            return matched, chain((chunk,), chunks)
        if list(map(version_of, chunk)) != versions[matched:end]:
            return matched, chain((chunk,), chunks)
        matched = end
    return matched, chunks


def _as_pairs(chunks: Iterable[ReadAgain]) -> Iterator[Sequence[Sequence[Any]]]:
    for chunk in chunks:
        if isinstance(chunk, VersionsText):
            yield from chunk.pair_chunks()
        else:
            yield chunk


def orphan_reason(kind: str, state: str, settle: float) -> str:
    what = "job is Running" if kind == JOBS else "container is %s" % state
    return (
        "%s, but no Slurm job of its name was queued in two listings %g s apart, and "
        "its row was not updated when read again after the second" % (what, settle)
    )


_RETRY_OVERDUE = (
    "awaiting crunch-dispatch.rb's retry for %s s, longer than retry_overdue_after (%g s): "
    "it retries a job it remembers as soon as a node is idle and gives up after %d tries, but "
    "keeps the list in memory only, so after a restart it never retries it; make sure, then "
    "fail it (arvados_fail_jobs uuids)"
)


def retry_overdue_reason(age: float, bound: float) -> str:
    return overdue_reasons(bound)(age)


def overdue_reasons(bound: float, then: str = "") -> Callable[[float], str]:
    """age -> retry_overdue_reason(age, bound) + `then`. The text around the age is made
    once: formatting all of it for each of 97,500 overdue jobs took 0.1 s, twice that
    with the concatenation after."""
    head, tail = _overdue_parts(bound, then)
    return lambda age: head + "%.0f" % age + tail


def _overdue_parts(bound: float, then: str) -> Tuple[str, str]:
    """The overdue text before the age, and after it (with `then`)."""
    head, tail = (_RETRY_OVERDUE % ("\0", bound, RETRY_UNLOCKED_LIMIT)).split("\0")
    return head, tail + then


def orphan_awaiting_retry_reason(settle: float, evidence: str) -> str:
    return (
        "job is Running without a Slurm job in two listings %g s apart, its row not updated, "
        "but %s: crunch-dispatch.rb keeps a job whose nodes failed (crunch-job exit 93) "
        "Running without a Slurm job until idle nodes return, then runs it again" % (settle, evidence)
    )


def orphan_entry_maker(
    kind: str, settle: float, awaiting: Optional[str] = None, bound: float = DEFAULT_RETRY_OVERDUE_AFTER
) -> Callable[[LiveRow], Dict[str, Any]]:
    """record -> its report entry, should it be orphaned; for a crunch v1 job with
    `awaiting` (V1_DISPATCHER_EVIDENCE's text), as awaiting crunch-dispatch.rb's retry,
    with its age and whether it is overdue past `bound`. The record is a Record, or a row
    in its field order (LiveRow).

    One dict display per record, whole: the run makes one for each live record (100,000s)
    while the server still sends the rows, and a key added afterwards cost a dict resize
    each."""
    # One reason text per live state, shared by every entry. Keyed as Record.state is
    # typed: a live record's state is one of them.
    reasons: Dict[Optional[str], str] = {state: orphan_reason(kind, state, settle) for state in LIVE_STATES[kind]}
    if kind == CONTAINERS or awaiting is None:
        lock = "is_locked_by_uuid" if kind == JOBS else "locked_by_uuid"

        def orphan_entry(record: LiveRow) -> Dict[str, Any]:
            uuid, state, started_at, locked_by_uuid, priority, _finished, _recent, _age, _version = record
            entry = {
                "uuid": uuid,
                "state": state,
                "started_at": started_at,
                "reason": reasons[state],
                lock: locked_by_uuid,
            }
            if kind == CONTAINERS:
                entry["priority"] = priority
            return entry

        return orphan_entry
    reason = orphan_awaiting_retry_reason(settle, awaiting)
    # overdue_reasons(bound, "; " + reason) spelt out here, and the test for overdue: two
    # calls fewer per record, for every entry the run makes on its path.
    head, tail = _overdue_parts(bound, "; " + reason)

    def awaiting_entry(record: LiveRow) -> Dict[str, Any]:
        # The age at the first read, by the database's clock (_reconcile.db's age column).
        uuid, state, started_at, locked_by_uuid, _priority, _finished, _recent, age, _version = record
        # A NULL modified_at gives no age: nothing says how long the job has waited.
        overdue = age is not None and age > bound
        return {
            "uuid": uuid,
            "state": state,
            "started_at": started_at,
            # One f-string, not two concatenations (half the time for a text of 600
            # characters) nor a % formatting (a fifth more): the same text as "%.0f" % age.
            "reason": f"{head}{age:.0f}{tail}" if overdue else reason,
            "is_locked_by_uuid": locked_by_uuid,
            "age_seconds": None if age is None else round(age, 1),
            "overdue": overdue,
        }

    return awaiting_entry


class StrayJobs(NamedTuple):
    """The cluster's unwanted Slurm jobs of one kind in a listing."""

    stray: List[Dict[str, object]]
    # Named after a UUID the database lacks (stray too only when the caller says so).
    missing: List[Dict[str, object]]
    # Already ending (COMPLETING): only counted.
    leaving: int
    # Would be stray, but another Slurm user's than the one whose jobs may be stopped.
    other_user: List[Dict[str, object]]
    # The Slurm jobs of crunch v1 jobs still ending (is_ending): never stray.
    ending: List[Dict[str, object]]


def strays_of(
    kind: str, listing: Listing, records: Mapping[str, Record], slurm_user: Optional[str], missing_are_stray: bool
) -> StrayJobs:
    """The stray Slurm jobs of `kind` in `listing`, those the database has no record of, those
    that would be stray but belong to another Slurm user than `slurm_user` (None: any), and
    those of crunch v1 jobs still ending. `missing_are_stray`: this kind's, already decided."""
    result = StrayJobs([], [], 0, [], [])
    leaving = 0
    for name in sorted(listing.names(kind)):
        record = records.get(name)
        reason = missing_reason(kind) if record is None else stray_reason(kind, record)
        if reason is None:
            continue
        if record is not None and is_ending(kind, record):
            for job in listing.by_name[name]:
                spared: Dict[str, object] = dict(job.describe())
                spared.update(
                    kind=ENTRY_KIND[kind],
                    record_state=record.state,
                    age_seconds=_seconds(record.age),
                    reason=ending_reason(record),
                )
                result.ending.append(spared)
            continue
        for job in listing.by_name[name]:
            ours = slurm_user is None or job.user == slurm_user
            if job.state in LEAVING_STATES:
                if ours and (record is not None or missing_are_stray):
                    leaving += 1
                continue
            entry: Dict[str, object] = dict(job.describe())
            entry.update(
                kind=ENTRY_KIND[kind],
                record_state=record.state if record else None,
                priority=record.priority if record else None,
                reason=reason,
            )
            if record is None:
                result.missing.append(entry)
            if record is not None or missing_are_stray:
                (result.stray if ours else result.other_user).append(entry)
    return result._replace(leaving=leaving)


def stray_names_of(entries: Iterable[Mapping[str, Any]], kind: str) -> List[str]:
    """The names of the stray Slurm jobs of `kind` (plural, as the options name it) among
    `entries` (a result's stray_slurm_jobs), each once, in their order."""
    if kind not in ENTRY_KIND:
        raise ConfigError("kind must be one of %s, got %r" % (", ".join(KINDS), kind))
    return list(dict.fromkeys(entry["name"] for entry in entries if entry["kind"] == ENTRY_KIND[kind]))


def _seconds(age: Optional[float]) -> Optional[float]:
    return None if age is None else round(age, 1)
