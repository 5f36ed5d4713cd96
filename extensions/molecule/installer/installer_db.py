#!/usr/bin/env python3
"""The `installer` scenario's containers, in api1's PostgreSQL, from the Molecule
controller (libpq's PG* variables say where; the jobs come from ../cluster/cluster_db.py).

    installer_db.py containers   replace the containers with five as crunch-dispatch-slurm
                                 leaves them: three Running and one Locked, locked by the
                                 system root token (lock_count 1), and one Cancelled; print
                                 their UUIDs as JSON
    installer_db.py report UUID.. JSON: each container's state, priority and lock

Only the columns the recovery playbooks read, plus the NOT NULL ones (the schema is
lab/schema/tables.sql). Run with the project virtualenv's Python from the repository root.
"""

from __future__ import annotations

import argparse
import json
import secrets
import string
import sys

import psycopg

PREFIX = "zzzzz"
SYSTEM_ROOT_TOKEN_UUID = "%s-gj3su-000000000000000" % PREFIX
OWNER = "%s-tpzed-000000000000000" % PREFIX


def new_uuid(infix: str) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "%s-%s-%s" % (PREFIX, infix, "".join(secrets.choice(alphabet) for _ in range(15)))


def add_containers() -> dict:
    made = {
        "running": [new_uuid("dz642") for _ in range(3)],
        "locked": new_uuid("dz642"),
        "cancelled": new_uuid("dz642"),
    }
    rows = [(uuid, "Running") for uuid in made["running"]] + [
        (made["locked"], "Locked"),
        (made["cancelled"], "Cancelled"),
    ]
    with psycopg.connect("") as conn:
        # A second verify of the same hosts starts without the first one's containers.
        conn.execute("DELETE FROM containers")
        for uuid, state in rows:
            # Last modified ten minutes ago: past the playbook's orphan grace (60 s).
            conn.execute(
                "INSERT INTO containers (uuid, owner_uuid, state, priority, created_at, updated_at,"
                " modified_at, started_at, locked_by_uuid, lock_count)"
                " VALUES (%s, %s, %s, %s, now() - interval '1 hour', now(),"
                " (now() AT TIME ZONE 'UTC') - interval '10 minutes',"
                " CASE WHEN %s = 'Running' THEN now() - interval '50 minutes' END, %s, 1)",
                (
                    uuid,
                    OWNER,
                    state,
                    0 if state == "Cancelled" else 1,
                    state,
                    None if state == "Cancelled" else SYSTEM_ROOT_TOKEN_UUID,
                ),
            )
    return made


def report(uuids: list) -> dict:
    with psycopg.connect("") as conn:
        return {
            uuid: {"state": state, "priority": priority, "locked_by_uuid": locked_by}
            for uuid, state, priority, locked_by in conn.execute(
                "SELECT uuid, state, priority, locked_by_uuid FROM containers WHERE uuid = ANY(%s)", (uuids,)
            )
        }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("containers")
    report_parser = commands.add_parser("report")
    report_parser.add_argument("uuids", nargs="+")
    args = parser.parse_args(argv)
    result = add_containers() if args.command == "containers" else report(args.uuids)
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
