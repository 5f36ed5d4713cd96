"""lab/datagen.py against the lab's PostgreSQL: loads, counts, deferred indexes.

Each test loads into ``fresh_db`` (a clone of arvados_template, see
tests/integration/conftest.py) as the ``arvados`` role, as the demo does.
"""

from __future__ import annotations

import re
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from lab import cluster_rows, datagen


@pytest.fixture
def cluster_db(fresh_db):
    return psycopg.conninfo.make_conninfo(**fresh_db.connection)


def small_spec(**overrides):
    now = datagen.utc_now()
    values = dict(
        boot_time=now - timedelta(minutes=30),
        now=now,
        jobs=300,
        running=25,
        queued=10,
        running_after_boot=3,
        tasks_per_job=3,
        users=12,
        idle_users=3,
        seed=3,
    )
    values.update(overrides)
    return datagen.ClusterSpec(**values)


def table_counts(conninfo):
    with psycopg.connect(conninfo) as conn:
        return {
            table: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]
            for table in datagen.CLUSTER_TABLES
        }


def index_names(conninfo):
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
        return {name for (name,) in rows}


def test_small_cluster_loads_and_counts_match_the_summary(cluster_db):
    summary, timings = datagen.load_cluster(cluster_db, small_spec())
    assert not timings.deferred_indexes
    counts = table_counts(cluster_db)
    assert counts["logs"] == 0
    assert {t: n for t, n in counts.items() if n} == dict(summary.rows)
    with psycopg.connect(cluster_db) as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
        assert states == dict(summary.jobs_by_state)
        running = {uuid for (uuid,) in conn.execute("SELECT uuid FROM jobs WHERE state = 'Running'")}
        assert running == set(summary.running_uuids)
        # the cleanup's own token selection finds exactly the generator's job tokens
        selected = {
            uuid
            for (uuid,) in conn.execute("""
            SELECT t.uuid FROM jobs j
              JOIN users u ON u.uuid = j.is_locked_by_uuid
              JOIN api_client_authorizations t ON t.user_id = u.id
             WHERE j.state = 'Running' AND t.api_client_id = 0
               AND (t.expires_at IS NULL OR t.expires_at > now() AT TIME ZONE 'UTC')
               AND t.created_at BETWEEN j.created_at AND j.started_at
               AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.auth_uuid = t.uuid)""")
        }
        assert selected == set(summary.job_token_uuids.values())
        # sequences continue after the loaded ids
        next_id = conn.execute("SELECT nextval('jobs_id_seq')").fetchone()[0]
        assert next_id == conn.execute("SELECT max(id) + 1 FROM jobs").fetchone()[0]


def test_deferred_index_path_rebuilds_every_index(cluster_db):
    before = index_names(cluster_db)
    expected = {d.name for d in datagen.index_definitions()}
    assert expected <= before
    summary, timings = datagen.load_cluster(cluster_db, small_spec(), defer_indexes=True)
    assert timings.deferred_indexes and timings.index > 0
    assert index_names(cluster_db) == before
    with psycopg.connect(cluster_db) as conn:
        invalid = conn.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid").fetchone()[0]
        assert invalid == 0
        # the rebuilt trigram index serves Arvados' text search
        some_uuid = summary.running_before_boot[0]
        expression = trigram_expression()
        query = "SELECT uuid FROM jobs WHERE %s ILIKE %%s" % expression
        conn.execute("SET enable_seqscan = off")
        pattern = "%" + some_uuid[-9:] + "%"
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + query, (pattern,)))
        assert "jobs_trgm_text_search_idx" in plan
        found = conn.execute(query, (pattern,)).fetchall()
        assert (some_uuid,) in found


def trigram_expression():
    statement = next(d.statement for d in datagen.index_definitions() if d.name == "jobs_trgm_text_search_idx")
    start = statement.index("USING gin (") + len("USING gin (")
    return statement[start : statement.rindex(" public.gin_trgm_ops)")]


def test_loading_twice_needs_replace(cluster_db):
    datagen.load_cluster(cluster_db, small_spec(jobs=40, running=5, queued=2))
    with pytest.raises(RuntimeError, match="already hold rows"):
        datagen.load_cluster(cluster_db, small_spec(jobs=40, running=5, queued=2))
    summary, _timings = datagen.load_cluster(cluster_db, small_spec(jobs=40, running=5, queued=2, seed=4), replace=True)
    assert table_counts(cluster_db)["jobs"] == 40
    assert summary.rows["jobs"] == 40


def test_cli_loads_and_prints_the_summary(cluster_db, capsys):
    code = datagen.main(
        [
            "--dsn",
            cluster_db,
            "--jobs",
            "50",
            "--running",
            "6",
            "--queued",
            "4",
            "--seed",
            "9",
            "--boot-time",
            "@%d" % int((datagen.utc_now() - datagen.EPOCH).total_seconds() - 600),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Running 6" in out and "Queued 4" in out and "seed 9" in out
    assert table_counts(cluster_db)["jobs"] == 50


def test_demo_seeds_a_rebooted_cluster_and_shows_it(cluster_db, capsys):
    from lab import demo

    boot = datagen.utc_now() - timedelta(minutes=20)
    summary = demo.seed_rebooted(cluster_db, boot, seed=1, running=6, slurm_jobs=0, prefix="zzzzz")
    demo.show(cluster_db, boot, max_running=4)
    out = capsys.readouterr().out
    assert "Running jobs: 6 (5 started before boot, 1 after, 0 without started_at)" in out
    assert "... and 2 more" in out
    assert "dispatcher tokens: 6, of jobs started before boot: 5" in out
    assert re.search(r"^Running\s+6\s", out, re.MULTILINE)
    assert summary.running_before_boot[0] in out  # oldest first


def table_digests(conninfo):
    with psycopg.connect(conninfo) as conn:
        return {
            table: conn.execute(
                sql.SQL("SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY id), '')) FROM {} AS t").format(
                    sql.Identifier(table)
                )
            ).fetchone()[0]
            for table in datagen.CLUSTER_TABLES
        }


def test_parallel_generation_loads_the_same_rows(cluster_db, monkeypatch):
    # Small blocks so that two processes share the finished jobs.
    monkeypatch.setattr(cluster_rows, "FINISHED_BLOCK_JOBS", 40)
    spec = small_spec()
    alone, _alone_timings = datagen.load_cluster(cluster_db, spec, generation_workers=1)
    single = table_digests(cluster_db)
    shared, _shared_timings = datagen.load_cluster(cluster_db, spec, generation_workers=2, replace=True)
    assert table_digests(cluster_db) == single
    assert shared.rows == alone.rows and shared.tokens_by_kind == alone.tokens_by_kind
    assert shared.jobs_by_state == alone.jobs_by_state
    assert table_counts(cluster_db)["jobs"] == 300


def test_slurm_jobs_are_named_after_running_jobs(cluster_db, lab_env, monkeypatch):
    import subprocess

    for name in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(name, lab_env[name])
    summary, _timings = datagen.load_cluster(cluster_db, small_spec(jobs=30, running=4, queued=2, running_after_boot=1))
    submitted = datagen.submit_slurm_jobs(summary.running_uuids, limit=3, sleep_seconds=60)
    try:
        assert list(submitted) == summary.running_uuids[:3]
        queue = subprocess.run(
            ["squeue", "--noheader", "--format=%i %j", "--name=" + ",".join(submitted)],
            env=lab_env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        assert sorted(line.split() for line in queue.splitlines()) == sorted(
            [job_id, uuid] for uuid, job_id in submitted.items()
        )
    finally:
        subprocess.run(["scancel", *submitted.values()], env=lab_env, check=False, timeout=30)
