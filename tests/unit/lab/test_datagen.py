"""lab/datagen.py row generation, checked without a database."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from datetime import datetime, timedelta

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import uuids
from lab import cluster_rows, datagen

NOW = datetime(2026, 11, 30, 12, 0, 0)
BOOT = NOW - timedelta(hours=3)
PDH_RE = re.compile(r"^([0-9a-f]{32})\+(\d+)$")


def make_spec(**overrides):
    values = dict(
        boot_time=BOOT,
        now=NOW,
        prefix="abcde",
        jobs=120,
        running=15,
        queued=7,
        running_after_boot=2,
        tasks_per_job=3,
        users=8,
        idle_users=2,
        seed=11,
    )
    values.update(overrides)
    return datagen.ClusterSpec(**values)


def generate(**overrides):
    generator = datagen.ClusterGenerator(make_spec(**overrides))
    rows = list(generator.rows())
    tables = defaultdict(list)
    for row in rows:
        tables[row.table].append(row)
    return generator.summary, tables


@pytest.fixture(scope="module")
def cluster():
    return generate()


def dicts(rows):
    return [row.as_dict() for row in rows]


def in_window(token, job):
    return job["created_at"] <= token["created_at"] <= job["started_at"]


def test_every_uuid_has_its_kind_and_prefix(cluster):
    _summary, tables = cluster
    expected = {
        "jobs": "job",
        "job_tasks": "job_task",
        "api_client_authorizations": "token",
        "containers": "container",
        "users": "user",
    }
    for table, kind in expected.items():
        for row in dicts(tables[table]):
            assert uuids.is_uuid_of(kind, row["uuid"]), row["uuid"]
            assert row["uuid"].startswith("abcde-")


def test_uuids_and_tokens_are_unique(cluster):
    _summary, tables = cluster
    all_uuids = [row.as_dict()["uuid"] for rows in tables.values() for row in rows]
    assert len(all_uuids) == len(set(all_uuids))
    secrets = [row["api_token"] for row in dicts(tables["api_client_authorizations"])]
    assert len(secrets) == len(set(secrets))


def test_system_user_is_first_and_owns_users(cluster):
    _summary, tables = cluster
    users = dicts(tables["users"])
    assert users[0]["uuid"] == "abcde-tpzed-000000000000000"
    assert users[0]["id"] == 1 and users[0]["is_admin"]
    assert {user["owner_uuid"] for user in users} == {"abcde-tpzed-000000000000000"}
    assert [user["id"] for user in users] == list(range(1, 10))


def test_counts_add_up(cluster):
    summary, tables = cluster
    jobs = dicts(tables["jobs"])
    states = Counter(job["state"] for job in jobs)
    assert len(jobs) == 120
    assert states["Running"] == 15 and states["Queued"] == 7
    assert states["Complete"] + states["Failed"] + states["Cancelled"] == 98
    assert dict(summary.jobs_by_state) == dict(states)
    assert summary.rows == Counter({table: len(rows) for table, rows in tables.items()})
    started = [job for job in jobs if job["started_at"] is not None]
    assert len(tables["job_tasks"]) == 3 * len(started)
    tokens_by_kind = Counter(row.kind for row in tables["api_client_authorizations"])
    assert dict(summary.tokens_by_kind) == dict(tokens_by_kind)
    assert tokens_by_kind[datagen.JOB_TOKEN] == 15
    assert tokens_by_kind[datagen.FINISHED_JOB_TOKEN] == 98
    for kind in datagen.DECOY_KINDS:
        assert tokens_by_kind[kind] == 15
    assert len(summary.running_before_boot) == 13 and len(summary.running_after_boot) == 2


def test_ids_are_distinct_per_table(cluster):
    _summary, tables = cluster
    for table, rows in tables.items():
        ids = [row.as_dict()["id"] for row in rows]
        assert len(ids) == len(set(ids)), table


def test_job_fields_follow_their_state(cluster):
    _summary, tables = cluster
    for job in dicts(tables["jobs"]):
        state = job["state"]
        assert job["running"] is (state == "Running")
        assert job["created_at"] <= job["updated_at"]
        if state == "Queued":
            assert job["started_at"] is None and job["is_locked_by_uuid"] is None
            assert job["success"] is None
        if state == "Running":
            assert job["started_at"] is not None and job["finished_at"] is None
            assert job["success"] is None and job["log"] is None
            assert uuids.is_uuid_of("user", job["is_locked_by_uuid"])
            summary = json.loads(job["tasks_summary"])
            assert set(summary) == {"failed", "todo", "running", "done"}
            assert sum(summary.values()) == 3
        if state in datagen.FINISHED_STATES:
            assert job["finished_at"] >= job["started_at"] >= job["created_at"]
            assert job["success"] is (state == "Complete")
            assert (job["cancelled_at"] is not None) is (state == "Cancelled")


def test_portable_data_hashes_are_real_md5s(monkeypatch):
    hashed = {}
    real = datagen.portable_data_hash

    def recording(manifest_text):
        locator = real(manifest_text)
        hashed[locator] = manifest_text
        return locator

    monkeypatch.setattr(cluster_rows, "portable_data_hash", recording)
    _summary, tables = generate()
    jobs = dicts(tables["jobs"])
    locators = [job[column] for job in jobs for column in ("log", "output") if job[column]]
    assert len(locators) > 100
    for locator in locators:
        digest, size = PDH_RE.match(locator).groups()
        manifest = hashed[locator].encode()
        assert hashlib.md5(manifest).hexdigest() == digest
        assert len(manifest) == int(size)
        assert re.match(r"^\. [0-9a-f]{32}\+\d+ 0:\d+:\S+\n$", hashed[locator])
    for job in jobs:
        assert (job["log"] is not None) is (job["state"] in datagen.FINISHED_STATES)
        assert (job["output"] is not None) is (job["state"] == "Complete")
        assert job["script_parameters_digest"] == hashlib.md5(job["script_parameters"].encode()).hexdigest()


def test_portable_data_hash_formula():
    manifest = ". 37b51d194a7513e45b56f6524f2d51f2+3 0:3:bar\n"
    expected = hashlib.md5(manifest.encode()).hexdigest() + "+%d" % len(manifest)
    assert datagen.portable_data_hash(manifest) == expected


def test_job_tokens_belong_to_running_jobs_inside_their_window(cluster):
    summary, tables = cluster
    jobs = {job["uuid"]: job for job in dicts(tables["jobs"])}
    users = {user["id"]: user["uuid"] for user in dicts(tables["users"])}
    tokens = {row.as_dict()["uuid"]: row.as_dict() for row in tables["api_client_authorizations"]}
    assert set(summary.job_token_uuids) == set(summary.running_uuids)
    for job_uuid, token_uuid in summary.job_token_uuids.items():
        job, token = jobs[job_uuid], tokens[token_uuid]
        assert job["state"] == "Running"
        assert users[token["user_id"]] == job["is_locked_by_uuid"]
        assert token["api_client_id"] == 0 and token["expires_at"] is None
        assert in_window(token, job)


def test_valid_dispatcher_shaped_tokens_match_exactly_one_job(cluster):
    """What a cleanup selects (api_client_id 0, no expiry, the job user's, inside
    the window, not a container's) is exactly the running jobs' tokens."""
    summary, tables = cluster
    running = [job for job in dicts(tables["jobs"]) if job["state"] == "Running"]
    users = {user["id"]: user["uuid"] for user in dicts(tables["users"])}
    container_tokens = {row["auth_uuid"] for row in dicts(tables["containers"])}
    selected = Counter()
    for token in dicts(tables["api_client_authorizations"]):
        if token["api_client_id"] != 0 or token["expires_at"] is not None:
            continue
        if token["uuid"] in container_tokens:
            continue
        for job in running:
            if users[token["user_id"]] == job["is_locked_by_uuid"] and in_window(token, job):
                selected[token["uuid"]] += 1
    assert set(selected) == set(summary.job_token_uuids.values())
    assert set(selected.values()) == {1}


def test_each_decoy_differs_from_a_job_token_in_its_own_field(cluster):
    summary, tables = cluster
    rows = tables["api_client_authorizations"]
    users = {user["id"]: user["uuid"] for user in dicts(tables["users"])}
    running = [job for job in dicts(tables["jobs"]) if job["state"] == "Running"]
    runner_uuids = {job["is_locked_by_uuid"] for job in dicts(tables["jobs"]) if job["is_locked_by_uuid"]}
    container_tokens = {row["auth_uuid"] for row in dicts(tables["containers"])}
    by_kind = defaultdict(list)
    for row in rows:
        by_kind[row.kind].append(row.as_dict())

    def window_of_same_user(token):
        return [job for job in running if job["is_locked_by_uuid"] == users[token["user_id"]] and in_window(token, job)]

    for token in by_kind[datagen.OTHER_USER_TOKEN]:
        assert users[token["user_id"]] not in runner_uuids
        assert token["api_client_id"] == 0 and token["expires_at"] is None
    for token in by_kind[datagen.API_CLIENT_TOKEN]:
        assert token["api_client_id"] != 0 and token["expires_at"] is None
        assert window_of_same_user(token)
    for token in by_kind[datagen.EXPIRED_TOKEN]:
        assert token["api_client_id"] == 0
        assert token["expires_at"] is not None and token["expires_at"] < NOW
        assert window_of_same_user(token)
    for token in by_kind[datagen.CONTAINER_TOKEN]:
        assert token["uuid"] in container_tokens
        assert token["api_client_id"] == 0 and token["expires_at"] is None
        assert window_of_same_user(token)
    for token in by_kind[datagen.OUTSIDE_WINDOW_TOKEN]:
        assert token["api_client_id"] == 0 and token["expires_at"] is None
        assert users[token["user_id"]] in runner_uuids
        assert not window_of_same_user(token)
    for token in by_kind[datagen.FINISHED_JOB_TOKEN]:
        assert token["expires_at"] is not None and token["expires_at"] < NOW
    recorded = {kind: set(uuids_) for kind, uuids_ in summary.decoy_token_uuids.items()}
    for kind in datagen.DECOY_KINDS:
        assert recorded[kind] == {token["uuid"] for token in by_kind[kind]}


def test_running_jobs_straddle_the_boot_time(cluster):
    summary, tables = cluster
    jobs = {job["uuid"]: job for job in dicts(tables["jobs"])}
    assert all(jobs[uuid]["started_at"] < BOOT for uuid in summary.running_before_boot)
    assert all(BOOT <= jobs[uuid]["started_at"] < NOW for uuid in summary.running_after_boot)
    assert summary.boot_time == BOOT


def test_running_windows_never_overlap(cluster):
    _summary, tables = cluster
    windows = sorted(
        (job["created_at"], job["started_at"]) for job in dicts(tables["jobs"]) if job["state"] == "Running"
    )
    for (_previous_start, previous_end), (next_start, _next_end) in zip(windows, windows[1:], strict=False):
        assert previous_end < next_start


def test_tasks_point_at_their_started_job(cluster):
    _summary, tables = cluster
    jobs = {job["uuid"]: job for job in dicts(tables["jobs"])}
    per_job = Counter()
    for task in dicts(tables["job_tasks"]):
        job = jobs[task["job_uuid"]]
        per_job[task["job_uuid"]] += 1
        assert job["started_at"] is not None
        assert task["owner_uuid"] == job["owner_uuid"]
        if task["started_at"] is not None:
            assert task["started_at"] >= job["started_at"]
    assert set(per_job.values()) == {3}


def test_unstarted_running_jobs_get_a_token_but_no_tasks():
    summary, tables = generate(running_unstarted=2)
    jobs = {job["uuid"]: job for job in dicts(tables["jobs"])}
    assert len(summary.running_unstarted) == 2
    for uuid in summary.running_unstarted:
        assert jobs[uuid]["state"] == "Running" and jobs[uuid]["started_at"] is None
    task_jobs = {task["job_uuid"] for task in dicts(tables["job_tasks"])}
    assert not task_jobs & set(summary.running_unstarted)
    assert summary.tokens_by_kind[datagen.UNSTARTED_JOB_TOKEN] == 2


def test_same_seed_same_rows_other_seed_other_rows():
    def values(seed):
        generator = datagen.ClusterGenerator(make_spec(seed=seed))
        return [row.values for row in generator.rows()]

    assert values(5) == values(5)
    assert values(5) != values(6)


def test_options_switch_off_decoys_and_finished_tokens():
    summary, tables = generate(decoys=False, finished_job_tokens=False)
    assert set(summary.tokens_by_kind) == {datagen.JOB_TOKEN}
    assert not tables["containers"]


def test_rows_are_a_stream():
    generator = datagen.ClusterGenerator(make_spec(jobs=10**9, running=5, queued=5))
    stream = generator.rows()
    first = [next(stream) for _index in range(50)]  # does not build a billion rows first
    assert first[0].table == "users"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(prefix="ABCDE"), "prefix"),
        (dict(running=100, queued=30), "exceeds jobs"),
        (dict(running_after_boot=16), "running_after_boot"),
        (dict(idle_users=8), "at least one user"),
        (dict(idle_users=0), "idle user"),
        (dict(boot_time=NOW + timedelta(seconds=1)), "before now"),
        (dict(jobs=-1), "negative"),
    ],
)
def test_bad_specs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        datagen.ClusterGenerator(make_spec(**overrides))


def test_index_definitions_cover_the_required_indexes():
    definitions = {d.name: d for d in datagen.index_definitions()}
    for name in (
        "jobs_search_index",
        "jobs_trgm_text_search_idx",
        "index_jobs_on_uuid",
        "index_jobs_on_submit_id",
        "logs_search_index",
        "index_logs_on_uuid",
        "index_job_tasks_on_job_uuid",
        "index_api_client_authorizations_on_api_token",
        "index_containers_on_auth_uuid",
    ):
        assert name in definitions
    assert "gin_trgm_ops" in definitions["jobs_trgm_text_search_idx"].statement
    assert not any(d.table == "jobs" and "(state)" in d.statement for d in definitions.values())
    # the rebuild starts with the slow GIN index on jobs
    assert datagen._rebuild_order(list(definitions.values()))[0].name == "jobs_trgm_text_search_idx"


def test_sbatch_command_is_an_argument_list():
    uuid = "zzzzz-8i9sb-0123456789abcde"
    assert datagen.sbatch_command(uuid, 60) == [
        "sbatch",
        "--parsable",
        "--job-name=" + uuid,
        "--output=/dev/null",
        "--chdir=/tmp",
        "--wrap",
        "exec sleep 60",
    ]
    with pytest.raises(ValueError):
        datagen.sbatch_command("zzzzz-dz642-0123456789abcde", 60)


def test_submit_slurm_jobs_is_bounded_and_reads_job_ids():
    calls = []

    class Done:
        returncode = 0
        stderr = ""

        def __init__(self, number):
            self.stdout = "%d\n" % number

    def fake_run(command, **kwargs):
        calls.append((command, kwargs["env"]["LC_ALL"]))
        return Done(100 + len(calls))

    job_uuids = ["zzzzz-8i9sb-%015d" % n for n in range(5)]
    submitted = datagen.submit_slurm_jobs(job_uuids, limit=3, run=fake_run)
    assert submitted == {job_uuids[0]: "101", job_uuids[1]: "102", job_uuids[2]: "103"}
    assert [command[2] for command, _lc in calls] == ["--job-name=" + u for u in job_uuids[:3]]
    assert {lc for _command, lc in calls} == {"C"}


def test_parse_time_forms(tmp_path):
    assert datagen.parse_time("2026-11-30T10:00:00Z") == datetime(2026, 11, 30, 10, 0)
    assert datagen.parse_time("2026-11-30T11:00:00+01:00") == datetime(2026, 11, 30, 10, 0)
    assert datagen.parse_time("@0") == datetime(1970, 1, 1)
    stat = tmp_path / "stat"
    stat.write_text("cpu 1 2 3\nbtime 86400\nprocesses 5\n")
    assert datagen.host_boot_time(str(stat)) == datetime(1970, 1, 2)
    stat.write_text("cpu 1 2 3\n")
    with pytest.raises(ValueError, match="btime"):
        datagen.host_boot_time(str(stat))


def test_cli_help_runs():
    with pytest.raises(SystemExit) as exit_info:
        datagen.build_parser().parse_args(["--help"])
    assert exit_info.value.code == 0


def test_finished_blocks_are_independent_of_how_they_are_split(monkeypatch):
    monkeypatch.setattr(cluster_rows, "FINISHED_BLOCK_JOBS", 7)
    whole = datagen.ClusterGenerator(make_spec())
    rows = list(whole.rows())
    assert whole.finished_blocks == 14  # 98 finished jobs
    # as two worker processes would make them, odd and even blocks apart
    apart = datagen.ClusterGenerator(make_spec())
    split = (
        list(apart.user_rows())
        + list(apart.finished_rows(range(1, 14, 2)))
        + list(apart.finished_rows(range(0, 14, 2)))
        + list(apart.active_rows())
    )
    assert sorted(split) == sorted(rows)
    assert apart.summary.rows == whole.summary.rows
    for table in ("jobs", "job_tasks", "api_client_authorizations"):
        ids = [row.values[0] for row in rows if row.table == table]
        assert len(ids) == len(set(ids)), table
    qsequences = [row.as_dict()["qsequence"] for row in rows if row.table == "job_tasks"]
    assert len(qsequences) == len(set(qsequences))


# The demo's view (lab/demo.py) is built on the generator; its pure parts:


def test_demo_parse_squeue_keeps_only_arvados_named_jobs():
    from lab import demo

    output = (
        "12|zzzzz-8i9sb-0123456789abcde|RUNNING|1:02|root\n"
        "13|my interactive job|PENDING|0:00|alice\n"
        "14|zzzzz-dz642-0123456789abcde|PENDING|0:00|crunch\n"
        "15|zzzzz-8i9sb-0123456789abcde.sh|PENDING|0:00|root\n"
    )
    assert demo.parse_squeue(output) == [
        ("12", "zzzzz-8i9sb-0123456789abcde", "RUNNING", "1:02", "root"),
        ("14", "zzzzz-dz642-0123456789abcde", "PENDING", "0:00", "crunch"),
    ]
    assert demo.squeue_command() == ["squeue", "--all", "--noheader", "--format=%i|%j|%T|%M|%u"]


def test_demo_table_and_boot_side():
    from lab import demo

    assert demo.format_table(("a", "bb"), [(1, None), ("ccc", 2)]).splitlines() == ["a    bb", "---  --", "1", "ccc  2"]
    assert demo.boot_side(BOOT - timedelta(seconds=1), BOOT) == "before boot"
    assert demo.boot_side(BOOT, BOOT) == "after boot"
    assert demo.boot_side(None, BOOT) == "no started_at"


def test_demo_rebooted_cluster_has_one_job_after_boot():
    from lab import demo

    spec = demo.rebooted_spec(BOOT, NOW, seed=1, running=12, prefix="zzzzz")
    generator = datagen.ClusterGenerator(spec)
    list(generator.rows())
    assert len(generator.summary.running_before_boot) == 11
    assert len(generator.summary.running_after_boot) == 1
    just_booted = demo.rebooted_spec(NOW - timedelta(seconds=1), NOW, 1, 12, "zzzzz")
    assert just_booted.running_after_boot == 0


def test_demo_options_come_after_the_subcommand():
    from lab import demo

    args = demo.build_parser().parse_args(["show", "--max-running", "4", "--dsn", "dbname=x"])
    assert (args.command, args.max_running, args.dsn) == ("show", 4, "dbname=x")
    args = demo.build_parser().parse_args(["seed-rebooted", "--slurm-jobs", "0"])
    assert (args.slurm_jobs, args.boot_time, args.prefix) == (0, "btime", None)


def test_every_row_is_the_named_row_of_its_table_in_copy_order():
    """COPY writes a row's values in the order of COLUMNS[table]: each table's rows are one
    NamedTuple class whose fields are that order, so a value cannot land in the wrong column."""
    _summary, tables = generate(jobs=40, running=8, running_after_boot=2, queued=2)
    containers, _kept = cluster_rows.container_rows("zzzzz", 4, 2, datetime(2026, 1, 1), first_id=1)
    classes = defaultdict(set)
    for row in [row for rows in tables.values() for row in rows] + list(containers):
        classes[row.table].add(type(row.values))
    assert set(classes) == set(cluster_rows.COLUMNS)
    for table, seen in classes.items():
        (named,) = seen
        assert named._fields == cluster_rows.COLUMNS[table], table
