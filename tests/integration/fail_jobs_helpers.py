"""Shared helpers of the arvados_fail_jobs integration tests (module and command).

- `load(fresh_db, **spec)`: a generated cluster in the test's database, with a boot time
  30 minutes ago in whole seconds (so `before: @<epoch>` is exactly the generator's boot);
- `run_playbook(...)`: real `ansible-playbook` runs of the module, results as dicts;
- `run_cli(...)`: the `arvados-fail-jobs` command as a subprocess;
- snapshots of tables and a `pg_dump --data-only` of the whole database.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import uuid as uuid_module
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from lab import datagen
from tests.integration import module_playbook
from tests.integration.module_playbook import PYTHON, REPO_ROOT
from tests.integration.slurm_helpers import Slurm

MODULE = "arvados_ops.recovery.arvados_fail_jobs"
CLI = [str(PYTHON), "-m", "plugins.module_utils._cleanup.cli"]

TOKEN_TABLE = "api_client_authorizations"
TOKEN_INFIX_TEXT = "-gj3su-"


def conninfo(fresh_db) -> str:
    return psycopg.conninfo.make_conninfo(**{key: str(value) for key, value in fresh_db.connection.items()})


def boot_epoch(summary: datagen.Summary) -> int:
    return int((summary.boot_time - datagen.EPOCH).total_seconds())


def random_seed() -> int:
    # Random on purpose: job uuids derive from the seed, and Slurm job names of parallel
    # test runs (other engineers' too) must not collide. Printed so a failure can be replayed.
    seed = random.SystemRandom().randrange(2**31)
    print("datagen seed %d" % seed)
    return seed


def load(fresh_db, **overrides) -> datagen.Summary:
    now = datagen.utc_now()
    boot = now.replace(microsecond=0) - timedelta(minutes=30)
    values: dict[str, Any] = dict(
        boot_time=boot,
        now=now,
        jobs=60,
        running=12,
        queued=5,
        running_after_boot=3,
        running_unstarted=0,
        tasks_per_job=2,
        users=6,
        idle_users=1,
        seed=random_seed(),
        running_span=timedelta(hours=24),
    )
    values.update(overrides)
    summary, _timings = datagen.load_cluster(conninfo(fresh_db), datagen.ClusterSpec(**values))
    return summary


# -- looking at the database ------------------------------------------------------------


def rows_by_uuid(conn, table: str) -> dict[str, dict[str, Any]]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute("SELECT * FROM %s ORDER BY id" % table)
        rows = {row["uuid"]: row for row in cursor.fetchall()}
    conn.rollback()
    return rows


def jobs(conn) -> dict[str, dict[str, Any]]:
    return rows_by_uuid(conn, "jobs")


def tokens(conn) -> dict[str, dict[str, Any]]:
    return rows_by_uuid(conn, TOKEN_TABLE)


def logs(conn) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute("SELECT * FROM logs ORDER BY id")
        rows = cursor.fetchall()
    conn.rollback()
    return rows


def tasks_by_job(conn) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for job_uuid, task_uuid in conn.execute("SELECT job_uuid, uuid FROM job_tasks ORDER BY uuid"):
        found.setdefault(job_uuid, []).append(task_uuid)
    conn.rollback()
    return found


def could_hold(job: Mapping[str, Any], token: Mapping[str, Any], user_uuid: str) -> bool:
    """Whether `job` (a row of jobs) could hold `token` (a row of api_client_authorizations
    of the user `user_uuid`), as crunch-dispatch.rb 1.4.3 leaves them: a job of the user
    made no later than the token that is Queued or Running (a tempfailed or retried job
    keeps its token) or ended at or after it."""
    made = token["created_at"]
    if user_uuid not in (job["is_locked_by_uuid"], job["modified_by_user_uuid"]) or job["created_at"] > made:
        return False
    if job["state"] in ("Queued", "Running"):
        return True
    ends = [moment for moment in (job["finished_at"], job["cancelled_at"]) if moment is not None]
    return not ends or max(ends) >= made


def assert_revoked_or_left_to_a_holder(conn, result, expected, jobs_before) -> None:
    """Every token of `expected` is revoked, or left alone and reported with a job of its
    user that could hold it (could_hold) and that the run did not end."""
    left = {t["uuid"]: t for t in result["tokens_left_alone"]}
    assert set(result["revoked_tokens"]) <= set(expected)
    assert set(result["revoked_tokens"]) | (set(expected) & set(left)) == set(expected)
    ended = set(result.get("failed_jobs", [])) | set(result.get("requeued_jobs", []))
    rows = tokens(conn)
    for uuid, entry in left.items():
        holder = jobs_before.get(entry["could_belong_to"])
        if holder is not None:
            assert holder["uuid"] not in ended
            assert could_hold(holder, rows[uuid], entry["user_uuid"]), (uuid, entry)


# 1.4.3 services/api/app/models/job.rb:14-17 (Hash) and api_client_authorization.rb:13 (Array):
# Serializer.load makes NULL the empty object (1.4.3 services/api/lib/serializers.rb:38-39).
JOB_HASH_COLUMNS = ("components", "script_parameters", "runtime_constraints", "tasks_summary")
TOKEN_ARRAY_COLUMNS = ("scopes",)


def arvados_attribute(column: str, value: Any, serialized: Mapping[str, type]) -> Any:
    """A column's value as Arvados' audit row holds it (log.rb update_to, logged_attributes
    as JSON): timestamps as 1.4.3 config/initializers/time_format.rb writes them, serialized
    columns loaded (NULL as {} or [])."""
    if column in serialized:
        return serialized[column]() if value is None else json.loads(value)
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return value


def token_audit_attributes(row: Mapping[str, Any]) -> dict[str, Any]:
    """ApiClientAuthorization#logged_attributes (1.4.3 app/models/api_client_authorization.rb:81-83):
    every column but api_token."""
    serialized = {column: list for column in TOKEN_ARRAY_COLUMNS}
    return {k: arvados_attribute(k, v, serialized) for k, v in row.items() if k != "api_token"}


def assert_token_audit_rows(conn, log_rows, tokens_before, tokens_after, revoked, started, finished) -> None:
    """The `update` row crunch-dispatch.rb's `update_attributes expires_at: Time.now` wrote for
    each token it expired (1.4.3 services/api/lib/crunch_dispatch.rb:730, as the system user):
    one per revoked token, owner the system user, object_owner_uuid the token's user
    (api_client_authorization.rb:38-40 owner_uuid), summary "update of <uuid>", event_at the
    database's now (its modified_at is nil: :58-61, log.rb:90-92), the attributes before and
    after without api_token; no secret anywhere in the row."""
    users = dict(conn.execute("SELECT id, uuid FROM users").fetchall())
    conn.rollback()
    secrets = {row["api_token"] for row in tokens_before.values()}
    rows = {row["object_uuid"]: row for row in log_rows if TOKEN_INFIX_TEXT in row["object_uuid"]}
    assert sorted(rows) == sorted(revoked)
    for uuid, row in rows.items():
        before, after = tokens_before[uuid], tokens_after[uuid]
        assert row["event_type"] == "update"
        assert row["owner_uuid"] == row["modified_by_user_uuid"] == "%s-tpzed-000000000000000" % uuid[:5]
        assert row["object_owner_uuid"] == users[before["user_id"]]
        assert row["summary"] == "update of %s" % uuid
        assert started <= row["event_at"] <= finished
        properties = json.loads(row["properties"])
        assert sorted(properties) == ["new_attributes", "new_etag", "old_attributes", "old_etag"]
        assert properties["old_attributes"] == token_audit_attributes(before)
        assert properties["new_attributes"] == token_audit_attributes(after)
        assert properties["old_attributes"]["expires_at"] is None
        assert properties["new_etag"] != properties["old_etag"]
        text = json.dumps(row, default=str)
        assert "api_token" not in text and not [s for s in secrets if s in text]


def db_now(conn):
    value = conn.execute("SELECT now() AT TIME ZONE 'UTC'").fetchone()[0]
    conn.rollback()
    return value


def api_token_secrets(conn) -> list[str]:
    secrets = [row[0] for row in conn.execute("SELECT api_token FROM %s" % TOKEN_TABLE)]
    conn.rollback()
    return secrets


def pg_dump(fresh_db, lab_env: Mapping[str, str]) -> str:
    """Every row of every table, and every sequence's value: a full data dump."""
    su = fresh_db.superuser_connection
    completed = subprocess.run(
        [
            "pg_dump",
            "--data-only",
            "--no-owner",
            "-h",
            str(su["host"]),
            "-p",
            str(su["port"]),
            "-U",
            str(su["user"]),
            "-d",
            fresh_db.name,
        ],
        env=dict(lab_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    # pg_dump 15.14+ brackets its output with \restrict/\unrestrict and a random key.
    return "".join(
        line
        for line in completed.stdout.splitlines(keepends=True)
        if not line.startswith(("\\restrict ", "\\unrestrict "))
    )


# -- running the module and the command ------------------------------------------------


def write_config(fresh_db, directory: Path) -> Path:
    return fresh_db.write_arvados_config(directory / ("config-%s.yml" % fresh_db.name))


def run_playbook(
    lab_env: Mapping[str, str], directory: Path, tasks: Sequence[Mapping[str, Any]], timeout: float = 300
) -> tuple[list[dict[str, Any]], module_playbook.PlaybookRun]:
    """Each task's result, and the run itself (its output, to look for secrets in)."""
    run = module_playbook.run_playbook(MODULE, lab_env, directory, tasks, timeout)
    return run.results, run


def run_module(
    lab_env: Mapping[str, str], directory: Path, args: Mapping[str, Any], check: bool = False, diff: bool = False
) -> dict[str, Any]:
    results, _completed = run_playbook(lab_env, directory, [{"args": args, "check": check, "diff": diff}])
    return results[0]


def run_cli(
    lab_env: Mapping[str, str],
    directory: Path,
    options: Mapping[str, Any],
    flags: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """The command with `options` in an --options-file (as the boot unit gives them)."""
    options_file = directory / ("options-%s.yml" % uuid_module.uuid4().hex[:8])
    options_file.write_text(json.dumps(dict(options)))
    options_file.chmod(0o600)
    env = {k: v for k, v in lab_env.items() if k != "JOURNAL_STREAM"}  # plain prefixes
    return subprocess.run(
        CLI + ["--options-file", str(options_file)] + list(flags),
        cwd=str(REPO_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_json(completed: subprocess.CompletedProcess) -> dict[str, Any]:
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


# -- Slurm ------------------------------------------------------------------------------


def sbatch(lab_env: Mapping[str, str], job_uuid: str, sleep_seconds: int = 300) -> str:
    completed = subprocess.run(
        datagen.sbatch_command(job_uuid, sleep_seconds),
        env=dict(lab_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.strip().split(";")[0]


def squeue_names(lab_env: Mapping[str, str], job_ids: Sequence[str]) -> dict[str, str]:
    """Slurm job id -> name, for those of `job_ids` still in the queue."""
    if not job_ids:
        return {}
    completed = subprocess.run(
        ["squeue", "--noheader", "--format=%i %j", "--jobs=" + ",".join(job_ids)],
        env=dict(lab_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # squeue exits 1 with "Invalid job id specified" once every id has left the queue.
    if completed.returncode != 0 and "Invalid job id" in completed.stderr:
        return {}
    assert completed.returncode == 0, completed.stderr
    found = {}
    for line in completed.stdout.splitlines():
        job_id, name = line.split()
        found[job_id] = name
    return found


def scancel(lab_env: Mapping[str, str], job_ids: Sequence[str]) -> None:
    """Cancel the Slurm jobs this test submitted, by id (never by name), and wait until they
    have left the queue (a COMPLETING job holds back slurmctld's scheduling passes)."""
    slurm = Slurm(lab_env)
    slurm.submitted = list(job_ids)
    slurm.cancel_leftovers()


SLURM_CLIENTS = ("squeue", "scancel", "scontrol", "sbatch", "srun", "sinfo")


def env_without_slurm(lab_env: Mapping[str, str], directory: Path) -> dict[str, str]:
    """`lab_env` with a PATH of one directory that links every program of its PATH but
    Slurm's clients: a host without Slurm's tools, where everything else (sh, ansible's
    helpers) is found as before."""
    bin_dir = directory / "path-without-slurm"
    bin_dir.mkdir()
    for entry in lab_env["PATH"].split(os.pathsep):
        if not os.path.isdir(entry):
            continue
        for name in sorted(os.listdir(entry)):
            link = bin_dir / name
            if name not in SLURM_CLIENTS and not os.path.lexists(link):
                link.symlink_to(os.path.join(entry, name))
    return dict(lab_env, PATH=str(bin_dir))


def unchanged_except(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]], changed: set | None = None
) -> list[str]:
    """The uuids whose rows differ between two snapshots, other than those in `changed`."""
    changed = changed or set()
    assert set(before) == set(after)
    return sorted(u for u in before if u not in changed and before[u] != after[u])
