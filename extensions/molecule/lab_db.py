#!/usr/bin/env python3
"""The Molecule scenarios' own databases in the shared lab (lab/labctl.py), from the host.

    lab_db.py create NAME       clone arvados_template into NAME (dropped first if it
                                exists), seed a small cluster whose Running jobs started
                                before this host's boot (btime) but one; print JSON
    lab_db.py report NAME UUID  JSON: each job's state and its log rows, all log rows
    lab_db.py drop NAME         drop NAME
    lab_db.py connection        JSON: how the `arvados` role reaches the lab (password too)

Only databases named molecule_* are touched. Run with the project virtualenv's Python
from the repository root (it imports lab/).
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import psycopg
from psycopg import sql

from lab import datagen, labctl

NAME = re.compile(r"molecule_[a-z0-9_]{1,40}")


def database_name(text: str) -> str:
    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError("a database of the scenarios is named molecule_[a-z0-9_]+")
    return text


def drop(lab: labctl.LabSettings, name: str) -> None:
    with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def create(lab: labctl.LabSettings, name: str, running: int, seed: int) -> dict:
    drop(lab, name)
    with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(labctl.DB_ROLE), sql.Identifier(labctl.TEMPLATE_DATABASE)
            )
        )
    # The boot time of a container is its host's (/proc/stat is the kernel's): jobs
    # started before it are the stale ones, whenever the container itself restarts.
    spec = datagen.ClusterSpec(
        boot_time=datagen.host_boot_time(),
        now=datagen.utc_now(),
        prefix=lab.cluster_id,
        jobs=40,
        running=running,
        queued=3,
        running_after_boot=1,
        users=4,
        idle_users=1,
        seed=seed,
    )
    spec.validate()
    conninfo = psycopg.conninfo.make_conninfo(**lab.connection(name))
    summary, _timings = datagen.load_cluster(conninfo, spec, generation_workers=1)
    return {
        "database": name,
        "boot_time": summary.boot_time.isoformat() + "Z",
        "stale": summary.running_before_boot,
        "after_boot": summary.running_after_boot,
    }


def report(lab: labctl.LabSettings, name: str, uuids: list) -> dict:
    with psycopg.connect(**lab.superuser_connection(name)) as conn:
        jobs = {}
        for uuid, state, running, success, finished_at in conn.execute(
            "SELECT uuid, state, running, success, finished_at FROM jobs WHERE uuid = ANY(%s)", (uuids,)
        ):
            jobs[uuid] = {
                "state": state,
                "running": running,
                "success": success,
                "finished": finished_at is not None,
                "logs": 0,
            }
        for uuid, count in conn.execute(
            "SELECT object_uuid, count(*) FROM logs WHERE object_uuid = ANY(%s) "
            "AND event_type = 'dispatch' GROUP BY object_uuid",
            (uuids,),
        ):
            jobs[uuid]["logs"] = count
        (log_rows,) = conn.execute("SELECT count(*) FROM logs").fetchone()
    return {"jobs": jobs, "log_rows": log_rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    create_parser = commands.add_parser("create")
    create_parser.add_argument("name", type=database_name)
    create_parser.add_argument("--running", type=int, default=6)
    create_parser.add_argument("--seed", type=int, default=5)
    report_parser = commands.add_parser("report")
    report_parser.add_argument("name", type=database_name)
    report_parser.add_argument("uuids", nargs="+")
    drop_parser = commands.add_parser("drop")
    drop_parser.add_argument("name", type=database_name)
    commands.add_parser("connection")
    args = parser.parse_args(argv)

    lab = labctl.lab_settings()
    if args.command == "create":
        result = create(lab, args.name, args.running, args.seed)
    elif args.command == "report":
        result = report(lab, args.name, args.uuids)
    elif args.command == "drop":
        drop(lab, args.name)
        result = {"dropped": args.name}
    else:
        result = dict(lab.connection(), cluster_id=lab.cluster_id)
        result.pop("dbname")
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
