# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One reconciliation of Slurm's queue with the database, from the module's options.

How a run goes (nothing is ever written, so check mode is the same run):

1. Every option is checked and squeue is found before anything is asked.
2. The database is opened read-only; a standby (``pg_is_in_recovery()``) is refused
   unless ``allow_standby``; the cluster prefix comes from ``cluster_prefix`` or the
   database's one system user.
3. Listing 1: one ``squeue --all`` (only the cluster's UUID-named jobs are kept) and, with
   ``report_nodes``, one ``scontrol --all show node`` (the nodes down or drained), and while
   they run one scan per kind of the live records (``Running`` jobs; ``Locked`` and
   ``Running`` containers), each row with the age of its ``modified_at`` by the
   database's clock and, for containers, whether that is within ``orphan_grace``. Those
   named in listing 1 are counted, the ``Locked`` containers modified within the grace
   set aside, the others kept as candidates.
4. Once ``settle`` seconds have passed since listing 1 began, listing 2, and while it runs
   the candidates' row versions (``xmin``) are read again, set-based: by UUID
   (``uuid = ANY``, ``batch_size`` a statement) while they are at most half the live
   records, else by one scan of the unfinished live rows; with them, each ``Locked``
   candidate container's lock token and ``lock_count``, in one statement for all of them
   (none without one). While the server reads them, the candidates' report entries are
   put in order (libpq's pipeline mode, where libpq has it).
5. The names in listing 2 are read, set-based, to judge the strays, and whether a
   dispatcher holds the ``Dispatch`` advisory lock (pg_locks), while the versions are
   compared, chunk by chunk as they come. Candidates in listing 2 drop out; the others
   must have the row version of the first read: not updated at all since. Confirmed
   crunch v1 jobs are orphaned only with ``crunch_v1_dispatcher: stopped``, else awaiting
   crunch-dispatch.rb's retry.

6. Each orphaned ``Locked`` container's lock is diagnosed (locked_containers).

So squeue is asked exactly twice (scontrol once) and the database a few times per kind,
whatever the numbers of jobs: memory follows the live records and the Slurm queue, not the tables.
"""

from __future__ import annotations

import contextlib
import gc
import operator
import os
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
)

from .._cleanup.checks import BLOCKS_READS, lock_holders
from .._common.arvados_release import Release, parse_release
from .._common.errors import ConfigError, RecoveryError
from .._common.option_bounds import MAX_BATCH_SIZE, MAX_PG_TIMEOUT_SECONDS, MAX_SLEEP_SECONDS
from .._common.options import Option, count, option_fields, optional_match, parse, seconds
from .._common.uuids import check_prefix
from .._database.connect import connect, redact
from .._database.driver import SQLSTATE_LOCK_TIMEOUT, Connection, connection_lost, error_text, load_driver, sqlstate_of
from .._database.settings import CONNECTION_OPTIONS, DEFAULT_DB_WAIT, cluster_setting, resolve_database_settings
from .._dispatcher.state import lock_expected
from .._slurm.nodes import parse_show_node, scontrol_environment, show_node_command, unavailable
from .._slurm.queue import JOB_NODES_LISTING, client_environment, read_listing, squeue_command
from .._slurm.runner import (
    COMMAND_TIMEOUT_OPTION,
    Clock,
    ProcessHandle,
    Runner,
    SubprocessRunner,
    SystemClock,
    cluster_list,
    finish_command,
    require_program,
)
from .._slurm.users import SLURM_USER_NAME, SLURM_USER_REQUIREMENT
from .db import DISPATCH_LOCK_KEY, LIVE_CHUNK_ROWS, DatabaseReader, make_read_only, refuse_standby
from .engine import (
    CONTAINERS,
    DEFAULT_ORPHAN_GRACE,
    DEFAULT_RETRY_OVERDUE_AFTER,
    EVIDENCE,
    JOBS,
    KINDS,
    MAX_ORPHAN_GRACE,
    NEVER,
    ORPHAN_RULES,
    UNKNOWN,
    V1_DISPATCHER_EVIDENCE,
    Candidates,
    Listing,
    OrphanSearch,
    Record,
    is_recent,
    listing_of,
    orphan_entry_maker,
    strays_of,
    unconfirmed,
)
from .locked_containers import (
    MAX_DISPATCH_ATTEMPTS_KEY,
    UNKNOWN_LIMIT,
    DispatchLimit,
    LockToken,
    default_limit,
    diagnose,
)

RECONCILE_OPTIONS: Dict[str, Option] = {
    "cluster_prefix": Option("str"),
    "kinds": Option("list", list(KINDS), elements="str", choices=KINDS),
    "settle": Option("float", 10.0, check=seconds(MAX_SLEEP_SECONDS)),
    "orphans": Option("str", EVIDENCE, choices=ORPHAN_RULES),
    "crunch_v1_dispatcher": Option("str", UNKNOWN, choices=V1_DISPATCHER_EVIDENCE),
    # A longer grace hides real orphans.
    "orphan_grace": Option("float", DEFAULT_ORPHAN_GRACE, check=seconds(MAX_ORPHAN_GRACE)),
    # None: each kind as Arvados treats it (reconcile.py); true or false: both kinds.
    "missing_are_stray": Option("bool"),
    "retry_overdue_after": Option("float", DEFAULT_RETRY_OVERDUE_AFTER, check=seconds(MAX_SLEEP_SECONDS)),
    "allow_standby": Option("bool", False),
    "slurm_user": Option("str"),
    "slurm_users": Option("dict"),
    "slurm_clusters": Option("str"),
    "squeue_path": Option("path"),
    "report_nodes": Option("bool", True),
    "scontrol_path": Option("path"),
    "arvados_version": Option("str"),
    "command_timeout": COMMAND_TIMEOUT_OPTION,
    "db_wait": Option("float", DEFAULT_DB_WAIT, check=seconds(MAX_SLEEP_SECONDS)),
    # The session's statement_timeout.
    "query_timeout": Option("float", 300.0, check=seconds(MAX_PG_TIMEOUT_SECONDS, above=True)),
    "batch_size": Option("int", 10000, check=count(MAX_BATCH_SIZE)),
}
ALL_OPTIONS: Dict[str, Option] = dict(CONNECTION_OPTIONS, **RECONCILE_OPTIONS)


@dataclass(frozen=True)
class ReconcileOptions:
    """The reconciliation's own options, checked; a bad value names itself."""

    kinds: Tuple[str, ...]
    settle: float
    orphans: str
    cluster_prefix: Optional[str]
    slurm_user: Optional[str]
    slurm_clusters: Optional[str]
    squeue_path: str
    command_timeout: float
    db_wait: float
    query_timeout: float
    batch_size: int
    crunch_v1_dispatcher: str = UNKNOWN
    orphan_grace: float = DEFAULT_ORPHAN_GRACE
    missing_are_stray: Optional[bool] = None
    retry_overdue_after: float = DEFAULT_RETRY_OVERDUE_AFTER
    allow_standby: bool = False
    report_nodes: bool = False
    scontrol_path: Optional[str] = None
    # The Arvados release, for MaxDispatchAttempts' default when config.yml does not say.
    arvados_version: Optional[Release] = None
    # Per kind, overriding slurm_user: the Slurm user whose jobs of that kind may be stray.
    slurm_users: Mapping[str, str] = field(default_factory=dict)

    def missing_stray(self, kind: str) -> bool:
        """Whether Slurm jobs of `kind` named after UUIDs the database lacks are stray: the
        caller's word, else as Arvados does (1.4.3:services/api/lib/crunch_dispatch.rb:892-900
        cancels them for jobs; crunch-dispatch-slurm leaves them alone for containers)."""
        return kind == JOBS if self.missing_are_stray is None else self.missing_are_stray

    def user_of(self, kind: str) -> Optional[str]:
        """The Slurm user whose jobs of `kind` may be stray; None: every user's."""
        return self.slurm_users.get(kind, self.slurm_user)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ReconcileOptions:
        full = parse(RECONCILE_OPTIONS, {name: value for name, value in params.items() if name in RECONCILE_OPTIONS})
        # Every option is a field of the same name; those the table's checks do not say all
        # of are checked and converted here.
        fields = option_fields(full, RECONCILE_OPTIONS)
        fields.update(
            kinds=_kinds(full["kinds"]),
            cluster_prefix=_prefix(full["cluster_prefix"]),
            slurm_user=_slurm_user("slurm_user", full["slurm_user"]),
            slurm_clusters=cluster_list("slurm_clusters", _blank_as_none(full["slurm_clusters"])),
            squeue_path=require_program(full["squeue_path"] or "squeue"),
            scontrol_path=require_program(full["scontrol_path"] or "scontrol") if full["report_nodes"] else None,
            slurm_users=_users_by_kind(full["slurm_users"], full["slurm_user"]),
            arvados_version=_release(full["arvados_version"]),
        )
        return cls(**fields)


def _release(value: Any) -> Optional[Release]:
    """arvados_version's release; None when unset."""
    if value in (None, ""):
        return None
    return parse_release(value, "arvados_version: %r is not an Arvados release such as 2.7.4")


def _kinds(kinds: List[str]) -> Tuple[str, ...]:
    """The kinds in the engine's order; the option's choices have been checked."""
    if not kinds:
        raise ConfigError("kinds must be a non-empty list of %s" % ", ".join(KINDS))
    return tuple(kind for kind in KINDS if kind in kinds)


def _prefix(value: Any) -> Optional[str]:
    if value in (None, ""):
        return None
    try:
        return check_prefix(value)
    except ValueError as error:
        raise ConfigError("cluster_prefix: %s" % error) from error


def _users_by_kind(value: Optional[Mapping[str, Any]], slurm_user: Any) -> Dict[str, str]:
    """The Slurm user of each kind; the option's type (dict) has been checked."""
    if not value:
        return {}
    if slurm_user not in (None, ""):
        raise ConfigError("slurm_user and slurm_users are mutually exclusive: give one user, or one per kind")
    unknown = sorted(str(kind) for kind in value if kind not in KINDS)
    if unknown:
        raise ConfigError(
            "slurm_users: unknown kind(s) %s; known: %s" % (", ".join(map(repr, unknown)), ", ".join(KINDS))
        )
    users = {kind: _slurm_user("slurm_users.%s" % kind, user) for kind, user in value.items()}
    return {kind: user for kind, user in users.items() if user is not None}


def _slurm_user(name: str, value: Any) -> Optional[str]:
    """A Slurm user name as squeue prints it; empty: every user's."""
    return optional_match(name, _blank_as_none(value), SLURM_USER_NAME, SLURM_USER_REQUIREMENT)


def _blank_as_none(value: Any) -> Any:
    return None if value == "" else value


class SlurmLister:
    """One squeue per call, bounded by `command_timeout`; any failure is a RecoveryError."""

    def __init__(self, options: ReconcileOptions, runner: Runner, environ: Mapping[str, str]):
        self.argv = squeue_command(options.squeue_path, clusters=options.slurm_clusters, listing=JOB_NODES_LISTING)
        self.timeout = options.command_timeout
        self.runner = runner
        self.env = client_environment(environ)
        self.calls = 0

    def start(self) -> ProcessHandle:
        """Start one squeue; the caller works meanwhile and then calls finish()."""
        self.calls += 1
        return self.runner.start(self.argv, self.env)

    def finish(self, handle: ProcessHandle, prefix: str, kinds: Sequence[str]) -> Listing:
        stdout = finish_command(handle, "squeue", self.timeout)
        return listing_of(read_listing(stdout, JOB_NODES_LISTING), prefix, kinds)


class NodeLister:
    """One ``scontrol --all show node``, bounded by `command_timeout`; any failure is a
    RecoveryError (a report that says nothing of the nodes would read as none down)."""

    def __init__(self, options: ReconcileOptions, runner: Runner, environ: Mapping[str, str]):
        if options.scontrol_path is None:
            # from_params finds scontrol only when report_nodes asks for the nodes.
            raise ValueError("no scontrol_path: report_nodes is off")
        self.argv = show_node_command(options.scontrol_path, options.slurm_clusters)
        self.timeout = options.command_timeout
        self.runner = runner
        self.env = scontrol_environment(environ)
        self.calls = 0

    def start(self) -> ProcessHandle:
        self.calls += 1
        return self.runner.start(self.argv, self.env)

    def finish(self, handle: ProcessHandle) -> List[Dict[str, Any]]:
        return unavailable(parse_show_node(finish_command(handle, "scontrol show node", self.timeout)))


# What a timed database call returns.
_T = TypeVar("_T")
_uuid_of_entry = operator.itemgetter("uuid")
# The result's lists, counted in its `counts`.
COUNTED = (
    "stray_slurm_jobs",
    "jobs_ending",
    "missing_from_database",
    "orphaned_jobs",
    "jobs_awaiting_retry",
    "orphaned_containers",
    "skipped_other_user",
    "slurm_nodes",
)


class _Read(NamedTuple):
    """One kind's first read, as the run keeps it (Reconciler._read_records)."""

    versions: Candidates
    # The records modified within the orphan grace.
    spared: List[Record]
    # The report entry of every live record, in the order read.
    entries: List[Dict[str, Any]]
    # How many of the entries say they are overdue.
    overdue: int


class _Drafts(NamedTuple):
    """The report entries of one kind's candidates, by UUID, and how many are overdue."""

    entries: List[Dict[str, Any]]
    overdue: int


@dataclass
class _SecondPoll:
    """Listing 2 and the database's answers as it was taken."""

    listing: Listing
    # By kind: the report entry of every candidate after listing 1, by UUID.
    drafts: Dict[str, _Drafts]
    # By kind: the candidates whose row the re-read found updated, or no longer live.
    changed: Dict[str, Set[str]]
    # By kind: the records of the names in listing 2.
    named: Dict[str, Dict[str, Record]]
    holders: List[Dict[str, Any]]
    # The lock of each Locked candidate container, by UUID (none read: empty).
    tokens: Dict[str, LockToken]


@dataclass
class _Phase:
    """Seconds spent, for the report (and the benchmark)."""

    squeue: float = 0.0
    database: float = 0.0


class Reconciler:
    """One run: `db` is a _reconcile.db.DatabaseReader (or a fake), `lister` a SlurmLister."""

    def __init__(
        self,
        options: ReconcileOptions,
        db: DatabaseReader,
        lister: SlurmLister,
        clock: Clock,
        server: str = "of this connection",
        nodes: Optional[NodeLister] = None,
        dispatch_limit: DispatchLimit = UNKNOWN_LIMIT,
    ):
        self.options = options
        self.db = db
        self.lister = lister
        # Reads the nodes down or drained beside the first squeue; None: not asked.
        self.nodes = nodes
        self.dispatch_limit = dispatch_limit
        self.clock = clock
        # How the database server is named in an error: host, port, database.
        self.server = server
        self.time = _Phase()

    def run(self) -> Dict[str, Any]:
        with _no_cyclic_gc():
            return self._run()

    def _run(self) -> Dict[str, Any]:
        options = self.options
        standby = self._timed_db(self.db.in_recovery)
        if standby and not options.allow_standby:
            raise refuse_standby(self.server)
        prefix, prefix_source = self._prefix()
        first_began = self.clock.now()
        first, searches, read, nodes = self._first_poll(prefix)
        self.clock.sleep(max(0.0, first_began + options.settle - self.clock.now()))
        poll = self._second_poll(prefix, searches, read)
        second = poll.listing
        result: Dict[str, Any] = {
            "changed": False,
            "cluster_prefix": prefix,
            "cluster_prefix_source": prefix_source,
            "settle": options.settle,
            "orphans_rule": options.orphans,
            "orphans_rule_means": ORPHAN_RULES[options.orphans],
            "orphan_grace": options.orphan_grace,
            "crunch_v1_dispatcher": options.crunch_v1_dispatcher,
            "missing_are_stray": options.missing_are_stray,
            "missing_are_stray_by_kind": {kind: options.missing_stray(kind) for kind in options.kinds},
            "retry_overdue_after": options.retry_overdue_after,
            "database_is_standby": standby,
            "stray_slurm_jobs": [],
            "jobs_ending": [],
            "missing_from_database": [],
            "skipped_other_user": [],
            "orphaned_jobs": [],
            "jobs_awaiting_retry": [],
            "orphaned_containers": [],
            "orphans_withheld": {},
            "evidence": {},
            "ending_slurm_jobs": 0,
            "slurm_nodes": nodes,
        }
        overdue = sum(self._judge(kind, search, poll, result) for kind, search in searches.items())
        if CONTAINERS in searches:
            diagnose(result["orphaned_containers"], poll.tokens, prefix, self.dispatch_limit)
            result["max_dispatch_attempts"] = self.dispatch_limit.describe()
        result["dispatcher"] = _dispatcher(poll.holders, lock_expected(options.arvados_version))
        result["slurm"] = {
            "squeue_calls": self.lister.calls,
            "scontrol_calls": self.nodes.calls if self.nodes else 0,
            "first_listing": first.count(),
            "second_listing": second.count(),
            "other_clusters_jobs": second.other_clusters,
        }
        result["counts"] = {key: len(result[key]) for key in COUNTED}
        result["counts"]["jobs_retry_overdue"] = overdue
        result["database_statements"] = self.db.statements
        result["seconds"] = {"squeue": round(self.time.squeue, 6), "database": round(self.time.database, 6)}
        return result

    def _first_poll(
        self, prefix: str
    ) -> Tuple[Listing, Dict[str, OrphanSearch], Dict[str, _Read], List[Dict[str, Any]]]:
        """(listing 1, the search of each kind, the first read of each kind with the report
        entry of each live record, the nodes down or drained): its squeue and scontrol run
        while the live records are read, since they wait on different servers."""
        began = self.clock.now()
        squeue = self.lister.start()
        scontrol = self.nodes.start() if self.nodes else None
        read = {kind: self._timed_db(self._read_records, kind) for kind in self.options.kinds}
        first = self._finish_listing(squeue, began, prefix)
        nodes = self._finish_nodes(self.nodes, scontrol, began) if self.nodes and scontrol is not None else []
        searches = {kind: OrphanSearch(kind, made.versions, made.spared, first) for kind, made in read.items()}
        return first, searches, read, nodes

    def _finish_nodes(self, nodes: NodeLister, handle: ProcessHandle, began: float) -> List[Dict[str, Any]]:
        try:
            return nodes.finish(handle)
        finally:
            self.time.squeue += self.clock.now() - began

    def _send_lock_tokens(
        self, read: Mapping[str, _Read], searches: Mapping[str, OrphanSearch]
    ) -> Callable[[], Dict[str, LockToken]]:
        """Asks for the lock of each Locked candidate container with the re-read, in one
        statement, none when there is none or no orphan can be reported: read after the
        comparison it cost one more round trip on the run's path. A candidate that drops
        out afterwards has its lock read for nothing; the Locked candidates are a few
        thousand at most where the live records are 100,000s."""
        search = searches.get(CONTAINERS)
        if search is None or self.options.orphans == NEVER:
            return lambda: {}
        candidates = search.candidates
        locked = [
            entry["uuid"]
            for entry in read[CONTAINERS].entries
            if entry["state"] == "Locked" and entry["uuid"] in candidates
        ]
        return self._timed_db(self.db.send_lock_tokens, locked) if locked else lambda: {}

    def _second_poll(self, prefix: str, searches: Mapping[str, OrphanSearch], read: Dict[str, _Read]) -> _SecondPoll:
        """Listing 2 and what the database says as it is taken, in one pipeline (where libpq
        has one), so that the server and Python work at once: the candidates' versions are
        read again while the second squeue runs, and their entries sorted meanwhile; then the
        records of that listing's names and the Dispatch lock's holders are read while the
        versions are compared. A candidate absent from that listing was live, not updated,
        as the listing was taken; one whose Slurm job came meanwhile is in the listing and
        drops out in _judge."""
        began = self.clock.now()
        squeue = self.lister.start()
        with self.db.pipeline():
            versions = {
                kind: self._timed_db(self.db.send_reread, kind, search.candidates, search.record_count)
                for kind, search in searches.items()
            }
            tokens = self._send_lock_tokens(read, searches)
            drafts = {kind: _drafts(read.pop(kind), search.candidates) for kind, search in searches.items()}
            second = self._finish_listing(squeue, began, prefix)
            named = {kind: self._timed_db(self.db.send_by_uuid, kind, second.names(kind)) for kind in searches}
            holders = self._timed_db(self.db.send_lock_holders)
            # The wait for the versions and their comparison, chunk by chunk, timed as one.
            changed = {
                kind: self._timed_db(unconfirmed, search.candidates, versions.pop(kind)())
                for kind, search in searches.items()
            }
            return _SecondPoll(
                listing=second,
                drafts=drafts,
                changed=changed,
                named={kind: self._timed_db(named.pop(kind)) for kind in searches},
                holders=self._timed_db(holders),
                tokens=self._timed_db(tokens),
            )

    def _prefix(self) -> Tuple[str, str]:
        if self.options.cluster_prefix:
            return self.options.cluster_prefix, "cluster_prefix"
        prefix = self._timed_db(self.db.cluster_prefix)
        return prefix, "the database's system user %s-tpzed-000000000000000" % prefix

    def _finish_listing(self, handle: ProcessHandle, began: float, prefix: str) -> Listing:
        try:
            return self.lister.finish(handle, prefix, self.options.kinds)
        finally:
            self.time.squeue += self.clock.now() - began

    def _read_records(self, kind: str) -> _Read:
        """The live records of `kind`: their versions by UUID, those modified within the
        orphan grace, and the report entry each would have as an orphan, made as the rows
        come: the server is still scanning meanwhile (the Python of the read waited for it
        most of the time), where afterwards they cost 0.1 s more. No record is kept whole.

        The rows are taken a chunk at a time and each chunk's work is done in C (map,
        filter, zip), but for the entries: the read is Python's work more than the
        server's now, and a loop over the rows spent 0.1 s of a 1 s run in its own steps."""
        options = self.options
        awaiting = V1_DISPATCHER_EVIDENCE[options.crunch_v1_dispatcher] if kind == JOBS else None
        entry_of = orphan_entry_maker(kind, options.settle, awaiting, options.retry_overdue_after)
        versions = Candidates()
        spared: List[Record] = []
        entries: List[Dict[str, Any]] = []
        overdue = 0
        rows = iter(self.db.read_records(kind))
        chunk = list(islice(rows, LIVE_CHUNK_ROWS))
        while chunk:
            versions.add_rows(chunk)
            spared.extend(map(Record._make, filter(is_recent, chunk)))
            made = list(map(entry_of, chunk))
            # Counted while the entries are in the processor's caches (_drafts).
            overdue += _overdue_count(made)
            entries.extend(made)
            chunk = list(islice(rows, LIVE_CHUNK_ROWS))
        return _Read(versions, spared, entries, overdue)

    def _judge(self, kind: str, search: OrphanSearch, poll: _SecondPoll, result: Dict[str, Any]) -> int:
        """The stray Slurm jobs of `kind` in listing 2, and its orphans: the candidates
        neither in listing 2 nor changed since the first read, unless withheld. Returns how
        many jobs awaiting crunch-dispatch.rb's retry it reported overdue."""
        second = poll.listing
        changed = poll.changed[kind]
        present = search.drop_present(second)
        options = self.options
        strays = strays_of(kind, second, poll.named[kind], options.user_of(kind), options.missing_stray(kind))
        result["stray_slurm_jobs"].extend(strays.stray)
        result["jobs_ending"].extend(strays.ending)
        result["missing_from_database"].extend(strays.missing)
        result["skipped_other_user"].extend(strays.other_user)
        result["ending_slurm_jobs"] += strays.leaving
        withheld = search.withheld_reason(options.orphans)
        entries, overdue = poll.drafts[kind]
        if withheld:
            entries, overdue = [], 0
        elif present or changed:
            candidates = search.candidates
            entries = [entry for entry in entries if entry["uuid"] in candidates and entry["uuid"] not in changed]
            overdue = _overdue_count(entries)
        result["orphans_withheld"][kind] = withheld
        result["evidence"][kind] = {
            "live": search.record_count,
            "with_slurm_job": search.with_slurm_job,
            "without_slurm_job": len(search.candidates),
            "recently_modified": len(search.recent),
        }
        if kind != JOBS:
            result["orphaned_containers"] = entries
        elif V1_DISPATCHER_EVIDENCE[options.crunch_v1_dispatcher] is None:
            result["orphaned_jobs"] = entries
        else:
            # Made as such (orphan_entry_maker): with their age, and whether overdue.
            result["jobs_awaiting_retry"] = entries
            return overdue
        return 0

    def _timed_db(self, function: Callable[..., _T], *arguments: Any) -> _T:
        began = self.clock.now()
        try:
            return function(*arguments)
        finally:
            self.time.database += self.clock.now() - began


def _dispatcher(holders: List[Dict[str, Any]], expected: Optional[bool]) -> Dict[str, Any]:
    alive = bool(holders)
    if expected is False and not alive:
        # 2.5.0:lib/controller/dblock/dblock.go:24 adds the Dispatch lock; 2.4.4's has none.
        reason = (
            "no session holds the Dispatch advisory lock (%d), and none is expected: dispatchers "
            "before Arvados 2.5 (arvados_version) take no lock; ask the service manager of the "
            "dispatcher's host" % DISPATCH_LOCK_KEY
        )
        return {
            "lock_key": DISPATCH_LOCK_KEY,
            "lock_held": False,
            "lock_expected": False,
            "holders": holders,
            "reason": reason,
        }
    return {
        "lock_key": DISPATCH_LOCK_KEY,
        "lock_held": alive,
        "lock_expected": expected,
        "holders": holders,
        "reason": (
            "a session holds the Dispatch advisory lock (%d): a dispatcher of Arvados "
            "2.5 or later runs" % DISPATCH_LOCK_KEY
            if alive
            else "no session holds the Dispatch advisory lock (%d), which alone cannot tell whether "
            "a dispatcher runs: crunch-dispatch-slurm, arvados-dispatch-cloud and -lsf (2.5 and "
            "later) take it once at start and never check it again, so after a PostgreSQL restart "
            "a running one holds none, and older ones never take it; ask the service manager of "
            "the dispatcher's host" % DISPATCH_LOCK_KEY
        ),
    }


def _drafts(read: _Read, candidates: Mapping[str, Any]) -> _Drafts:
    """The entries of the candidates, by UUID, and how many are overdue. `candidates` holds
    the UUIDs of the read's entries themselves, the same objects in the same order
    (Reconciler._read_records), but for the few taken out: one walk along both, comparing
    identities, finds them. Asking `candidates` for each entry's UUID instead probed its
    table at random, a miss of the processor's caches per entry (60-120 ms for 100,000
    entries on the busy lab, against 10). The overdue ones were counted as the entries were
    made, those taken out are subtracted: counted here after the sort, each look missed
    the caches too (13-33 ms for 97,500 entries); before it, 4-7 ms on the second poll's
    path, where counting each chunk as it is made costs 2.4 ms of the first read, whose
    Python waits for the server's scan anyway (measured on 100,000 entries, 2026-12-05)."""
    wanted = iter(candidates)
    want = next(wanted, None)
    drafts = []
    taken_out = []
    for entry in read.entries:
        if entry["uuid"] is want:
            drafts.append(entry)
            want = next(wanted, None)
        else:
            taken_out.append(entry)
    if len(drafts) == len(candidates):
        overdue = read.overdue - _overdue_count(taken_out)
    else:
        # Not the same objects in the same order after all: asked one by one, then.
        drafts = [entry for entry in read.entries if entry["uuid"] in candidates]
        overdue = _overdue_count(drafts)
    drafts.sort(key=_uuid_of_entry)
    return _Drafts(drafts, overdue)


def _overdue_count(entries: List[Dict[str, Any]]) -> int:
    """How many entries say they are overdue (only those awaiting a retry say so); summed
    in C, not by a generator: one call per entry on the run's largest list."""
    return sum(map(dict.get, entries, repeat("overdue"), repeat(False)))


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cycle collector off for the run: a run creates a few objects per live
    record (100,000s, none in a cycle), and each collection of the oldest generation walks
    them all again. Measured on 110,000 live records: 0.13 s of a 1.1 s run."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def check_params(params: Mapping[str, Any]) -> Tuple[Any, ReconcileOptions]:
    """(database settings, options): every value checked before anything is asked."""
    params = parse(ALL_OPTIONS, params)
    options = ReconcileOptions.from_params(params)
    return resolve_database_settings(params), options


def dispatch_limit(params: Mapping[str, Any], release: Optional[Tuple[int, int, int]]) -> DispatchLimit:
    """Containers.MaxDispatchAttempts: config.yml's when it sets one, else the release's
    default, else unknown."""
    found = cluster_setting(params, tuple(MAX_DISPATCH_ATTEMPTS_KEY.split(".")))
    if found and found[0].strip().isdigit():
        return DispatchLimit(int(found[0]), found[1])
    return default_limit(release) if release else UNKNOWN_LIMIT


def _server(conn: Connection) -> str:
    """The server this connection reached (libpq's answer, defaults and environment applied)."""
    info = conn.info
    return "%s:%s (database %s)" % (info.host, info.port, info.dbname)


def run_reconcile(
    params: Mapping[str, Any],
    connect_db: Callable[..., Connection] = connect,
    runner: Optional[Runner] = None,
    clock: Optional[Clock] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    settings, options = check_params(params)
    conn_kwargs = settings.as_psycopg_kwargs()
    conn_kwargs["options"] = "-c statement_timeout=%d" % int(options.query_timeout * 1000)
    driver = load_driver()
    runner = runner or SubprocessRunner()
    environ = os.environ if environ is None else environ
    lister = SlurmLister(options, runner, environ)
    # scontrol talks to one cluster only: with several, the nodes are not read (scontrol_calls 0).
    one_cluster = "," not in (options.slurm_clusters or "")
    nodes = NodeLister(options, runner, environ) if options.report_nodes and one_cluster else None
    limit = dispatch_limit(params, options.arvados_version) if CONTAINERS in options.kinds else UNKNOWN_LIMIT
    conn = connect_db(conn_kwargs, wait=options.db_wait, driver=driver)
    try:
        make_read_only(conn)
        reader = DatabaseReader(conn, options.batch_size, options.orphan_grace)
        result = Reconciler(options, reader, lister, clock or SystemClock(), _server(conn), nodes, limit).run()
    except driver.Error as error:
        raise RecoveryError(
            database_error_message(conn, error, options.query_timeout, conn_kwargs.get("password"), driver.Error)
        ) from None
    finally:
        conn.close()
    result["database"] = settings.source
    return result


# SQLSTATE 57014: query_canceled, which statement_timeout (query_timeout) raises.
SQLSTATE_QUERY_CANCELED = "57014"
# What the reads read: a session holding one of them ACCESS EXCLUSIVE (a migration, a
# LOCK TABLE) holds every read up.
TABLES_READ = ("jobs", "containers", "users")


def database_error_message(
    conn: Connection,
    error: BaseException,
    query_timeout: float,
    password: Optional[str],
    driver_error: Type[BaseException] = Exception,
) -> str:
    """One line for a database error. A read stopped by query_timeout names the option and,
    when the wait was for a table another session holds (issue 34: a read takes ACCESS
    SHARE, which waits only behind ACCESS EXCLUSIVE), the table and that session."""
    reason = redact(error_text(error), password)
    if sqlstate_of(error) not in (SQLSTATE_QUERY_CANCELED, SQLSTATE_LOCK_TIMEOUT) or connection_lost(conn):
        return "database error (nothing was changed): %s" % reason
    try:
        conn.rollback()
        holders = lock_holders(conn, TABLES_READ, BLOCKS_READS)
        conn.rollback()
    except driver_error:
        holders = []
    if not holders:
        return "a read ran past query_timeout (%g s), nothing was changed: %s" % (query_timeout, reason)
    return (
        "a read waited past query_timeout (%g s) for a table another session holds: %s; nothing was "
        "changed. Try again when that session has finished, or raise query_timeout"
        % (query_timeout, "; ".join(holders))
    )
