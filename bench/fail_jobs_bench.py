"""Benchmark of the arvados_fail_jobs cleanup on a large lab database (issue 4).

Side by side, in one run, each on its own copy of the same generated cluster:

(a) this collection's cleanup, through the `arvados-fail-jobs` command (a child process, so
    its peak RSS is its own), on every Running job started before the boot time;
(b) a per-row baseline doing what Arvados' Rails script did: select the jobs, then per job
    its own transaction (update the job, insert its log row, delete its tasks, expire its
    token), on a sample of the jobs, scaled;
(c) the floor: a bare `UPDATE jobs SET state = 'Failed'` of the same jobs, which is what
    PostgreSQL's upkeep of the jobs table and its indexes alone costs;
and then the command again on (a)'s database: the no-op rerun.

Run against the lab (`make lab-start`):

    .venv/bin/python -m bench.fail_jobs_bench --jobs 1000000 --running 100000

The generated cluster is kept as database `bench_fail_jobs_template` and reused by later
runs with the same sizes (`--rebuild` makes it anew).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql

from lab import datagen, labctl

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = 'bench_fail_jobs_template'
MESSAGE = 'benchmark: interrupted by a server reboot'


def superuser(lab):
    conn = psycopg.connect(**lab.superuser_connection('postgres'), autocommit=True)
    return conn


def database_comment(lab, name):
    with superuser(lab) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,)).fetchone()
    return row[0] if row else None


def clone(lab, name, template):
    with superuser(lab) as conn:
        conn.execute(sql.SQL('DROP DATABASE IF EXISTS {}').format(sql.Identifier(name)))
        # FILE_COPY: the default WAL_LOG strategy would write gigabytes of WAL for the copy.
        conn.execute(sql.SQL('CREATE DATABASE {} TEMPLATE {} OWNER arvados STRATEGY FILE_COPY')
                     .format(sql.Identifier(name), sql.Identifier(template)))


def drop(lab, name):
    with superuser(lab) as conn:
        conn.execute(sql.SQL('DROP DATABASE IF EXISTS {}').format(sql.Identifier(name)))


def build_template(lab, args, boot_time, now):
    wanted = 'jobs=%d running=%d tasks=%d seed=%d' % (args.jobs, args.running, args.tasks, args.seed)
    if not args.rebuild and database_comment(lab, TEMPLATE) == wanted:
        print('reusing %s (%s)' % (TEMPLATE, wanted), flush=True)
        return None
    print('generating %s: %s' % (TEMPLATE, wanted), flush=True)
    clone(lab, TEMPLATE, labctl.TEMPLATE_DATABASE)
    spec = datagen.ClusterSpec(
        boot_time=boot_time, now=now, jobs=args.jobs, running=args.running, queued=1000,
        running_after_boot=10, tasks_per_job=args.tasks, users=200, idle_users=20,
        seed=args.seed, finished_job_tokens=False)
    conninfo = psycopg.conninfo.make_conninfo(**lab.connection(TEMPLATE))
    _summary, timings = datagen.load_cluster(conninfo, spec, defer_indexes=True)
    with superuser(lab) as conn:
        conn.execute(sql.SQL('COMMENT ON DATABASE {} IS {}').format(
            sql.Identifier(TEMPLATE), sql.Literal(wanted)))
    return timings


def warm(lab, name):
    """Read the tables once, so every contender starts from the same (cached) state."""
    with psycopg.connect(**lab.connection(name)) as conn:
        for table in ('jobs', 'job_tasks', 'api_client_authorizations', 'users', 'logs'):
            conn.execute(sql.SQL('SELECT count(*) FROM {}').format(sql.Identifier(table)))


def running_count(lab, name, threshold):
    with psycopg.connect(**lab.connection(name)) as conn:
        return conn.execute("SELECT count(*) FROM jobs WHERE state = 'Running' AND started_at < %s",
                            (threshold,)).fetchone()[0]


def run_command(lab, name, before, batch_size, extra=()):
    """(wall seconds, peak RSS MiB of the child, its summary lines)."""
    options = {'config_file': str(lab.config_yml), 'db_name': name, 'batch_size': batch_size,
               'cancel_slurm_jobs': False, 'log_message': MESSAGE}
    with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as handle:
        json.dump(options, handle)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, '-m', 'plugins.module_utils.fail_jobs_cli', '--options-file',
            handle.name, '--before', before, '--quiet'] + list(extra)
    began = time.monotonic()
    child = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - began
    os.unlink(handle.name)
    if child.returncode != 0:
        raise SystemExit('arvados-fail-jobs failed: %s' % child.stderr.strip())
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return wall, rss, child.stdout


def engine_only_noop(lab, name, before):
    """The no-op rerun's time without the interpreter's start-up."""
    sys.path.insert(0, str(REPO))
    from plugins.module_utils.fail_jobs_run import run_fail_jobs  # pylint: disable=import-outside-toplevel
    params = {'config_file': str(lab.config_yml), 'db_name': name,
              'cancel_slurm_jobs': False, 'before': before}
    began = time.monotonic()
    result = run_fail_jobs(params, keep_uuids=False)
    return time.monotonic() - began, result['changed']


SQL_PER_ROW = (
    """UPDATE jobs SET state = 'Failed', running = false, success = false,
           finished_at = COALESCE(finished_at, now() AT TIME ZONE 'UTC'),
           modified_at = now() AT TIME ZONE 'UTC', updated_at = now() AT TIME ZONE 'UTC'
       WHERE uuid = %(uuid)s AND state = 'Running'""",
    """INSERT INTO logs (uuid, owner_uuid, object_uuid, object_owner_uuid, event_at, event_type,
                         summary, properties, created_at, updated_at, modified_at)
       VALUES (%(log_uuid)s, %(owner)s, %(uuid)s, %(owner)s, now() AT TIME ZONE 'UTC', 'dispatch',
               %(message)s, %(properties)s, now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC',
               now() AT TIME ZONE 'UTC')""",
    'DELETE FROM job_tasks WHERE job_uuid = %(uuid)s',
    """UPDATE api_client_authorizations a SET expires_at = now() AT TIME ZONE 'UTC'
       FROM users u
       WHERE u.uuid = %(locked_by)s AND a.user_id = u.id AND a.api_client_id = 0
         AND a.expires_at IS NULL AND a.created_at BETWEEN %(created)s AND %(started)s""",
)


def per_row_baseline(lab, name, threshold, sample):
    """Seconds for `sample` jobs the way the Rails script went: a transaction per job."""
    from plugins.module_utils.uuids import LOG_INFIX, new_uuid  # pylint: disable=import-outside-toplevel
    with psycopg.connect(**lab.connection(name)) as conn:
        began = time.monotonic()
        jobs = conn.execute(
            "SELECT uuid, owner_uuid, is_locked_by_uuid, created_at, started_at FROM jobs "
            "WHERE state = 'Running' AND started_at < %s ORDER BY uuid LIMIT %s",
            (threshold, sample)).fetchall()
        conn.commit()
        for uuid, owner, locked_by, created, started in jobs:
            params = {'uuid': uuid, 'owner': owner, 'locked_by': locked_by, 'created': created,
                      'started': started, 'log_uuid': new_uuid(uuid[:5], LOG_INFIX),
                      'message': MESSAGE, 'properties': json.dumps({'text': MESSAGE})}
            with conn.transaction():
                for statement in SQL_PER_ROW:
                    conn.execute(statement, params)
        return time.monotonic() - began, len(jobs)


def floor(lab, name, threshold):
    with psycopg.connect(**lab.connection(name)) as conn:
        began = time.monotonic()
        count = conn.execute("UPDATE jobs SET state = 'Failed' WHERE state = 'Running' "
                             "AND started_at < %s", (threshold,)).rowcount
        conn.commit()
        return time.monotonic() - began, count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--jobs', type=int, default=1000000)
    parser.add_argument('--running', type=int, default=100000)
    parser.add_argument('--tasks', type=int, default=5)
    parser.add_argument('--sample', type=int, default=10000, help='jobs the per-row baseline does')
    parser.add_argument('--seed', type=int, default=4)
    parser.add_argument('--batch-size', type=int, default=1000, help="the command's batch_size")
    parser.add_argument('--rebuild', action='store_true')
    parser.add_argument('--keep', action='store_true', help='keep the per-contender databases')
    parser.add_argument('--prepare-only', action='store_true',
                        help='only generate the template database (slow: minutes for 1M jobs)')
    args = parser.parse_args(argv)

    lab = labctl.lab_settings()
    now = datetime.utcnow().replace(microsecond=0)
    boot_time = now - timedelta(hours=1)
    load = build_template(lab, args, boot_time, now)
    if args.prepare_only:
        if load is not None:
            print('load: %.1f s (COPY %.1f s, indexes %.1f s)' % (load.total, load.copy, load.index))
        return 0
    with psycopg.connect(**lab.connection(TEMPLATE)) as conn:
        boot_time = conn.execute("SELECT max(started_at) FROM jobs WHERE state = 'Running'").fetchone()[0]
        threshold = conn.execute(
            "SELECT min(started_at) FROM (SELECT started_at FROM jobs WHERE state = 'Running' "
            "ORDER BY started_at DESC LIMIT 10) s").fetchone()[0]
    before = '@%d' % int((threshold - datetime(1970, 1, 1)).total_seconds())
    threshold = datetime(1970, 1, 1) + timedelta(seconds=int(before[1:]))

    names = {'a': 'bench_fj_module', 'b': 'bench_fj_per_row', 'c': 'bench_fj_floor'}
    for name in names.values():
        clone(lab, name, TEMPLATE)
        warm(lab, name)
    qualifying = running_count(lab, names['a'], threshold)

    wall, rss, _out = run_command(lab, names['a'], before, args.batch_size)
    noop_wall, _rss, noop_out = run_command(lab, names['a'], before, args.batch_size)
    noop_engine, noop_changed = engine_only_noop(lab, names['a'], before)
    baseline, sampled = per_row_baseline(lab, names['b'], threshold, args.sample)
    floor_time, floor_count = floor(lab, names['c'], threshold)

    per_job = lambda seconds, count: 1000.0 * seconds / max(count, 1)  # noqa: E731
    rows = [
        ('(a) arvados-fail-jobs (set-based, batches of %d)' % args.batch_size, qualifying, wall,
         per_job(wall, qualifying)),
        ('(b) per-row transactions, %d jobs' % sampled, sampled, baseline, per_job(baseline, sampled)),
        ('(c) floor: bare UPDATE jobs SET state', floor_count, floor_time, per_job(floor_time, floor_count)),
    ]
    print()
    if load is not None:
        print('load: %.1f s (COPY %.1f s, indexes %.1f s)' % (load.total, load.copy, load.index))
    print('cluster: %d jobs, %d Running before the threshold, %d tasks per job' % (
        args.jobs, qualifying, args.tasks))
    print()
    print('| contender | jobs | seconds | ms per job |')
    print('| --- | ---: | ---: | ---: |')
    for label, count, seconds, ms in rows:
        print('| %s | %d | %.2f | %.3f |' % (label, count, seconds, ms))
    print()
    print('(a) vs (b): %.1f times faster per job; (a) vs floor: %.2f times the floor' % (
        rows[1][3] / rows[0][3], rows[0][3] / rows[2][3]))
    print('(a) peak RSS of the command: %.0f MiB' % rss)
    print('no-op rerun: %.3f s for the command (process start included), %.3f s in the engine; '
          'changed=%s' % (noop_wall, noop_engine, noop_changed))
    print(noop_out.strip().replace('\n', '; '))
    if not args.keep:
        for name in names.values():
            drop(lab, name)
    return 0


if __name__ == '__main__':
    sys.exit(main())
