"""Loading a generated cluster into PostgreSQL: COPY from one pass, the indexes dropped and rebuilt for large loads."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from lab.cluster_rows import (
    CLUSTER_TABLES,
    COLUMNS,
    DEFER_INDEXES_FROM_JOBS,
    INDEXES_SQL,
    ClusterGenerator,
    ClusterSpec,
    ContainerSet,
    Row,
    Summary,
    container_rows,
)
from lab.settings import LabError

_INDEX_RE = re.compile(r"^CREATE (?:UNIQUE )?INDEX (\w+) ON public\.(\w+) ", re.MULTILINE)


class IndexDefinition(NamedTuple):
    name: str
    table: str
    statement: str


def index_definitions(path: Path = INDEXES_SQL) -> list[IndexDefinition]:
    """The CREATE INDEX statements of ``indexes.sql``, in file order."""
    definitions = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _INDEX_RE.match(line)
        if match:
            definitions.append(IndexDefinition(match.group(1), match.group(2), line.rstrip(";")))
    return definitions


def _rebuild_order(definitions: Sequence[IndexDefinition]) -> list[IndexDefinition]:
    # GIN indexes take longest: start them first so the other worker builds
    # the btrees meanwhile.
    return sorted(definitions, key=lambda d: ("USING gin" not in d.statement, d.table != "jobs"))


@dataclass
class LoadTimings:
    drop_indexes: float = 0.0
    copy: float = 0.0
    index: float = 0.0
    analyze: float = 0.0
    total: float = 0.0
    deferred_indexes: bool = False


def _connect(conninfo: str):
    import psycopg  # the lab's only third-party need; unit tests never import it

    return psycopg.connect(conninfo)


def _existing_rows(conn) -> dict[str, int]:
    from psycopg import sql

    counts = {}
    with conn.cursor() as cur:
        for table in CLUSTER_TABLES:
            cur.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT 1) AS t").format(sql.Identifier(table)))
            counts[table] = cur.fetchone()[0]
    return counts


def _prepare_tables(conn, replace: bool) -> None:
    from psycopg import sql

    if replace:
        conn.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in CLUSTER_TABLES)
            )
        )
        conn.commit()
        return
    busy = [table for table, count in _existing_rows(conn).items() if count]
    conn.rollback()
    if busy:
        raise LabError("tables already hold rows: %s (use replace=True / --replace)" % ", ".join(busy))


# pg_catalog rather than information_schema: the same answer in a fraction of the time.
SQL_TABLE_COLUMNS = (
    "SELECT c.relname, a.attname FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
    "AND c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped"
)


def table_columns(conn, tables) -> dict[str, set[str]]:
    """{table: set of its column names} for those of `tables` the current schema has."""
    present: dict[str, set[str]] = {}
    for table, column in conn.execute(SQL_TABLE_COLUMNS, (list(tables),)).fetchall():
        present.setdefault(table, set()).add(column)
    return present


def copy_columns(conn) -> dict[str, tuple[str, ...]]:
    """Per generated table, the columns of ``COLUMNS`` that the target table has.

    Read once per load. Today's schema has every one of them; an older one
    (schema/2017) lacks some, and the generator's values for those are left
    out of the COPY.
    """
    present = table_columns(conn, COLUMNS)
    conn.rollback()
    missing = [table for table in COLUMNS if table not in present]
    if missing:
        raise LabError("the database has no table %s" % ", ".join(missing))
    return {table: tuple(c for c in columns if c in present[table]) for table, columns in COLUMNS.items()}


def _check_index_definitions(conn, definitions: Sequence[IndexDefinition]) -> None:
    """Refuse to defer indexes with a file that would not rebuild the target's own.

    Every secondary index the cluster tables have must be one the file
    creates again (those it lacks are created); else the wrong schema's
    indexes.sql was given, e.g. today's for a 2017 database.
    """
    rows = conn.execute(
        "SELECT ic.relname FROM pg_index i"
        " JOIN pg_class ic ON ic.oid = i.indexrelid"
        " JOIN pg_class t ON t.oid = i.indrelid"
        " JOIN pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = 'public' AND t.relname = ANY(%s)"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        (list(CLUSTER_TABLES),),
    ).fetchall()
    conn.rollback()
    unknown = sorted({name for (name,) in rows} - {d.name for d in definitions})
    if unknown:
        listed = ", ".join(unknown[:5]) + (" (+%d more)" % (len(unknown) - 5) if len(unknown) > 5 else "")
        raise LabError(
            "the indexes file does not define this database's indexes %s: is it the "
            "other schema's (indexes_sql=INDEXES_2017_SQL / --schema 2017)?" % listed
        )


def drop_indexes(conn, definitions: Sequence[IndexDefinition]) -> None:
    from psycopg import sql

    for definition in definitions:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS public.{}").format(sql.Identifier(definition.name)))
    conn.commit()


def create_indexes(
    conninfo: str, definitions: Sequence[IndexDefinition], workers: int = 2, maintenance_work_mem: str = "256MB"
) -> None:
    """Run the CREATE INDEX statements on ``workers`` connections at once."""
    pending = list(_rebuild_order(definitions))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def next_definition() -> IndexDefinition | None:
        with lock:
            return pending.pop(0) if pending and not errors else None

    def worker() -> None:
        try:
            with _connect(conninfo) as conn:
                conn.autocommit = True
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
                definition = next_definition()
                while definition is not None:
                    conn.execute(definition.statement)
                    definition = next_definition()
        except BaseException as error:  # reported by the caller's thread
            with lock:
                errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(max(1, workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _copy_rows(conninfo: str, rows: Iterator[Row], columns: dict[str, tuple[str, ...]] | None = None) -> None:
    """COPY every row, one connection per table, all open at once.

    ``columns`` (from ``copy_columns``) names, per table, the columns to
    COPY, a subset of ``COLUMNS``; None = all of them.
    """
    from psycopg import sql

    with ExitStack() as stack:
        connections = []
        copy_stacks = []
        writers = {}

        def writer_for(table: str) -> Callable[[tuple], None]:
            names = COLUMNS[table] if columns is None else columns[table]
            conn = stack.enter_context(_connect(conninfo))
            conn.execute("SET synchronous_commit = off")
            statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in names)
            )
            copy_stack = stack.enter_context(ExitStack())
            connections.append(conn)
            copy_stacks.append(copy_stack)
            write = copy_stack.enter_context(conn.cursor().copy(statement)).write_row
            if tuple(names) == COLUMNS[table]:
                return write
            keep = [COLUMNS[table].index(name) for name in names]
            return lambda values: write([values[i] for i in keep])

        for row in rows:
            write = writers.get(row.table)
            if write is None:
                write = writers[row.table] = writer_for(row.table)
            write(row.values)
        # Finish every COPY (any error surfaces here) before committing any table.
        for copy_stack in copy_stacks:
            copy_stack.close()
        for conn in connections:
            conn.commit()


def _reset_sequences(conn) -> None:
    from psycopg import sql

    for table in CLUSTER_TABLES:
        conn.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence({t}, 'id'), coalesce((SELECT max(id) FROM {i}), 0) + 1, false)"
            ).format(t=sql.Literal("public." + table), i=sql.Identifier(table))
        )
    conn.commit()


def _load_finished_blocks(
    conninfo: str, spec: ClusterSpec, blocks: Sequence[int], columns: dict[str, tuple[str, ...]] | None = None
) -> dict:
    """Worker process: COPY some blocks of finished jobs, return their counts."""
    generator = ClusterGenerator(spec)
    _copy_rows(conninfo, generator.finished_rows(blocks), columns)
    summary = generator.summary
    return {"rows": summary.rows, "jobs_by_state": summary.jobs_by_state, "tokens_by_kind": summary.tokens_by_kind}


def _merge_counts(summary: Summary, counts: dict) -> None:
    summary.rows.update(counts["rows"])
    summary.jobs_by_state.update(counts["jobs_by_state"])
    summary.tokens_by_kind.update(counts["tokens_by_kind"])


def default_generation_workers() -> int:
    # Python makes the rows slower than PostgreSQL stores them: one generating
    # process per core, but PostgreSQL's COPY backends need some CPU as well.
    return max(1, min(4, os.cpu_count() or 1))


def load_cluster(
    conninfo: str,
    spec: ClusterSpec,
    defer_indexes: bool | None = None,
    replace: bool = False,
    index_workers: int = 2,
    generation_workers: int | None = None,
    indexes_sql: Path | None = None,
) -> tuple[Summary, LoadTimings]:
    """Generate ``spec`` into the database at ``conninfo`` ('' = libpq's PG* env).

    Blocks of finished jobs are generated and copied by ``generation_workers``
    processes; each process commits its own COPYs, so a failed load can leave
    rows behind: load again with ``replace=True``.

    Only the columns the target tables have are copied (read once from
    the catalog), so the 2017 schema loads too. ``indexes_sql`` is
    the file whose indexes a deferred-index load drops and rebuilds:
    ``INDEXES_SQL`` (default) or, for the 2017 schema, ``INDEXES_2017_SQL``.
    """
    generator = ClusterGenerator(spec)
    timings = LoadTimings()
    if defer_indexes is None:
        defer_indexes = spec.jobs >= DEFER_INDEXES_FROM_JOBS
    timings.deferred_indexes = defer_indexes
    workers = generation_workers or default_generation_workers()
    workers = max(1, min(workers, generator.finished_blocks))
    definitions = index_definitions(indexes_sql or INDEXES_SQL)
    began = time.monotonic()
    with ExitStack() as stack:
        pool = None
        if workers > 1:
            # Fork before any connection exists, so children share no socket.
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(workers - 1))
        conn = stack.enter_context(_connect(conninfo))
        _prepare_tables(conn, replace)
        columns = copy_columns(conn)
        if all(columns[table] == COLUMNS[table] for table in COLUMNS):
            columns = None  # today's schema: every row as generated
        if defer_indexes:
            _check_index_definitions(conn, definitions)
            drop_indexes(conn, definitions)
            timings.drop_indexes = time.monotonic() - began
        try:
            copy_began = time.monotonic()
            blocks = range(generator.finished_blocks)
            pending = (
                [
                    pool.apply_async(_load_finished_blocks, (conninfo, spec, blocks[worker::workers], columns))
                    for worker in range(1, workers)
                ]
                if pool
                else []
            )
            _copy_rows(
                conninfo,
                itertools.chain(
                    generator.user_rows(), generator.finished_rows(blocks[0::workers]), generator.active_rows()
                ),
                columns,
            )
            for result in pending:
                _merge_counts(generator.summary, result.get())
            timings.copy = time.monotonic() - copy_began
        finally:
            if defer_indexes:
                # Even after a failed load the schema keeps its indexes.
                index_began = time.monotonic()
                create_indexes(conninfo, definitions, workers=index_workers)
                timings.index = time.monotonic() - index_began
        _reset_sequences(conn)
        analyze_began = time.monotonic()
        conn.autocommit = True
        from psycopg import sql

        for table in CLUSTER_TABLES:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        timings.analyze = time.monotonic() - analyze_began
    timings.total = time.monotonic() - began
    return generator.summary, timings


def load_containers(
    conninfo: str, prefix: str, count: int, live: int, now: datetime, seed: int = 0, finished_keep: int = 0
) -> ContainerSet:
    """Append generated containers (see container_rows) to the database at `conninfo`."""
    with _connect(conninfo) as conn:
        first_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM containers").fetchone()[0]
        columns = copy_columns(conn)
    rows, kept = container_rows(prefix, count, live, now, first_id, seed, finished_keep)
    _copy_rows(conninfo, rows, None if columns["containers"] == COLUMNS["containers"] else columns)
    with _connect(conninfo) as conn:
        _reset_sequences(conn)
        conn.commit()
        conn.autocommit = True
        conn.execute("ANALYZE containers")
    return kept
