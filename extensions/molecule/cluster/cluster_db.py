#!/usr/bin/env python3
"""The `cluster` scenario's database, on the `api` container's PostgreSQL, from the
Molecule controller. libpq's PG* variables say where (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGDATABASE: the scenario sets them to the api container's address).

    cluster_db.py seed          load a small cluster (lab/datagen.py) whose Running jobs
                                started before this host's boot (btime, which is also the
                                containers' boot time: the kernel is shared) but six;
                                print JSON: the stale jobs, the six started after the
                                boot in start order, a time between the second and the
                                third of them, each Running job's token and decoys
    cluster_db.py report UUID.. JSON: each job's state, finish time and log rows, each
                                token's expiry (job and token UUIDs, mixed), all log rows
    cluster_db.py start N       mark N of the seeded Queued jobs Running from now, as
                                crunch-dispatch.rb does when their Slurm jobs start;
                                print their UUIDs (JSON)

Run with the project virtualenv's Python from the repository root (it imports lab/).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC

import psycopg

from lab import datagen

# Running jobs: this many started before the boot, AFTER_BOOT after it.
STALE = 4
AFTER_BOOT = 6
# Queued jobs for `start`: one per heal round (three), then the check-mode gate's three
# (tasks/heal_check_gate.yml). The generator makes them last: with FINISHED kept, the rows
# before them are those of a seed with fewer.
QUEUED = 6
FINISHED = 27


def seed(seed_value: int) -> dict:
    spec = datagen.ClusterSpec(
        boot_time=datagen.host_boot_time(),
        now=datagen.utc_now(),
        prefix="zzzzz",
        jobs=FINISHED + STALE + AFTER_BOOT + QUEUED,
        running=STALE + AFTER_BOOT,
        queued=QUEUED,
        running_after_boot=AFTER_BOOT,
        users=4,
        idle_users=1,
        seed=seed_value,
    )
    # replace: a second verify of the same hosts starts from a clean database.
    summary, _timings = datagen.load_cluster("", spec, replace=True, generation_workers=1)
    after_boot = summary.running_after_boot
    with psycopg.connect("") as conn:
        # Submitted after every token the seed made. The generator spreads the Queued jobs
        # over the last hour, among the jobs started after a boot less than an hour ago:
        # a Queued job's window (from its creation, with no end) then holds the tokens its
        # user made for a later job too, and the cleanup leaves a token two windows hold
        # (seen: step 3 left a failed job's token live on a host booted 20 minutes before).
        conn.execute(
            "UPDATE jobs SET created_at = (now() AT TIME ZONE 'UTC'), modified_at = (now() AT TIME ZONE 'UTC'), "
            "updated_at = (now() AT TIME ZONE 'UTC') WHERE state = 'Queued'"
        )
        started = dict(conn.execute("SELECT uuid, started_at FROM jobs WHERE uuid = ANY(%s)", (after_boot,)).fetchall())
    second, third = started[after_boot[1]], started[after_boot[2]]
    if not second < third:
        raise SystemExit("the jobs started after the boot are not in start order")
    return {
        "boot_time": summary.boot_time.isoformat() + "Z",
        "stale": summary.running_before_boot,
        "after_boot": after_boot,
        # The generator gives each job a slot of its own: the midpoint lies between
        # the second job's start and the third's.
        "between_second_and_third": (second + (third - second) / 2).isoformat() + "Z",
        "tokens": summary.job_token_uuids,
        "decoys": summary.decoy_token_uuids,
    }


def report(uuids: list) -> dict:
    with psycopg.connect("") as conn:
        jobs = {}
        for uuid, state, running, success, finished_at in conn.execute(
            "SELECT uuid, state, running, success, finished_at FROM jobs WHERE uuid = ANY(%s)", (uuids,)
        ):
            jobs[uuid] = {
                "state": state,
                "running": running,
                "success": success,
                "finished_at": finished_at.isoformat() + "Z" if finished_at else None,
                # Seconds since the epoch: what the journal's times compare with.
                "finished_epoch": (finished_at.replace(tzinfo=UTC).timestamp() if finished_at else None),
                "logs": 0,
            }
        for uuid, count in conn.execute(
            "SELECT object_uuid, count(*) FROM logs WHERE object_uuid = ANY(%s) "
            "AND event_type = 'dispatch' GROUP BY object_uuid",
            (uuids,),
        ):
            jobs[uuid]["logs"] = count
        tokens = {
            uuid: {"expired": expired, "expires_at": expires_at.isoformat() + "Z" if expires_at else None}
            for uuid, expires_at, expired in conn.execute(
                "SELECT uuid, expires_at, expires_at IS NOT NULL AND expires_at <= "
                "(now() AT TIME ZONE 'UTC') FROM api_client_authorizations WHERE uuid = ANY(%s)",
                (uuids,),
            )
        }
        (log_rows,) = conn.execute("SELECT count(*) FROM logs").fetchone()
        running = [uuid for (uuid,) in conn.execute("SELECT uuid FROM jobs WHERE state = 'Running' ORDER BY uuid")]
    return {"jobs": jobs, "tokens": tokens, "log_rows": log_rows, "running": running}


def start(count: int) -> list:
    """The heal rounds' work on the rebooted node: Queued jobs taken to Running now, the
    first by UUID (none is Running after seed: every Running job there has a role)."""
    with psycopg.connect("") as conn:
        started = conn.execute(
            "UPDATE jobs SET state = 'Running', running = true, started_at = (now() AT TIME ZONE 'UTC'), "
            "modified_at = (now() AT TIME ZONE 'UTC') WHERE uuid IN "
            "(SELECT uuid FROM jobs WHERE state = 'Queued' ORDER BY uuid LIMIT %s) RETURNING uuid",
            (count,),
        ).fetchall()
    if len(started) != count:
        raise SystemExit("%d Queued jobs left, %d asked for" % (len(started), count))
    return sorted(uuid for (uuid,) in started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    seed_parser = commands.add_parser("seed")
    seed_parser.add_argument("--seed", type=int, default=12)
    report_parser = commands.add_parser("report")
    report_parser.add_argument("uuids", nargs="+")
    start_parser = commands.add_parser("start")
    start_parser.add_argument("count", type=int)
    args = parser.parse_args(argv)
    if args.command == "seed":
        result = seed(args.seed)
    elif args.command == "start":
        result = start(args.count)
    else:
        result = report(args.uuids)
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
