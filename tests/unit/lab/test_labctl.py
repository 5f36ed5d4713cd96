"""The parts of lab/labctl.py that need no running service."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from lab import labctl

SLURMD_C = (
    "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=24105\nUpTime=0-00:04:45\n"
)


def settings_for(lab_dir="/srv/lab", **environ) -> labctl.LabSettings:
    return labctl.lab_settings(lab_dir, environ={"LAB_SCHEMA_DIR": "/nowhere", **environ})


def test_defaults_follow_the_agreed_lab_conventions():
    settings = labctl.lab_settings(environ={})
    assert settings.lab_dir == labctl.REPO_ROOT / ".lab"
    assert (settings.pg_port, settings.slurmctld_port, settings.slurmd_port) == (55432, 16817, 16818)
    assert settings.cluster_id == "zzzzz"
    assert settings.schema_dir == labctl.REPO_ROOT / "lab" / "schema"


def test_every_setting_comes_from_the_environment():
    settings = labctl.lab_settings(
        environ={
            "LAB_DIR": "relative/lab",
            "LAB_PG_PORT": "55433",
            "LAB_SLURMCTLD_PORT": "16827",
            "LAB_SLURMD_PORT": "16828",
            "LAB_CLUSTER_ID": "abcde",
        }
    )
    assert settings.lab_dir == Path(os.getcwd()) / "relative/lab"
    assert (settings.pg_port, settings.slurmctld_port, settings.slurmd_port, settings.cluster_id) == (
        55433,
        16827,
        16828,
        "abcde",
    )


@pytest.mark.parametrize(
    "variable, value",
    [
        ("LAB_PG_PORT", "5o432"),
        ("LAB_PG_PORT", "80"),
        ("LAB_SLURMD_PORT", "70000"),
        ("LAB_CLUSTER_ID", "ZZZZZ"),
        ("LAB_CLUSTER_ID", "zzzz"),
    ],
)
def test_bad_settings_are_refused_by_name(variable, value):
    with pytest.raises(labctl.LabError, match=variable):
        labctl.lab_settings("/srv/lab", environ={variable: value})


def test_sockets_stay_inside_a_short_lab_dir():
    settings = settings_for("/work/main/.lab")
    assert settings.socket_dir == Path("/work/main/.lab/run")
    assert settings.munge_socket == Path("/work/main/.lab/run/munge/munge.socket.2")


def test_a_long_lab_dir_gets_short_distinct_socket_dirs_in_tmp():
    deep = "/builds/" + "very-long-ci-folder-name/" * 4
    first, second = settings_for(deep + "a"), settings_for(deep + "b")
    assert first.socket_dir.parent == Path("/tmp")
    assert first.socket_dir != second.socket_dir
    for settings in (first, second):
        longest = settings.pg_socket_dir / f".s.PGSQL.{settings.pg_port}.lock"
        assert len(str(longest)) < 100 and len(str(settings.munge_socket)) < 100


def test_exports_name_the_lab_and_never_the_password():
    settings = settings_for("/srv/my lab", LAB_PG_PORT="55433")
    exports = settings.exports()
    assert exports["PGPASSFILE"] == "/srv/my lab/pgpass"
    assert (exports["PGHOST"], exports["PGPORT"], exports["PGUSER"], exports["PGDATABASE"]) == (
        "127.0.0.1",
        "55433",
        "arvados",
        "arvados_production",
    )
    assert exports["SLURM_CONF"] == "/srv/my lab/slurm/slurm.conf"
    assert exports["ARVADOS_LAB_CONFIG"] == "/srv/my lab/arvados/config.yml"
    assert "PGPASSWORD" not in exports


def test_env_lines_survive_a_shell():
    settings = settings_for("/srv/it's a lab")
    script = labctl.render_env_sh(settings) + 'printf "%s" "$LAB_DIR"'
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout == "/srv/it's a lab"
    assert all(line.startswith("export ") for line in labctl.render_env_sh(settings).splitlines())


def test_env_prints_the_labs_own_settings_not_the_callers(tmp_path, capsys):
    started = settings_for(tmp_path, LAB_PG_PORT="55436", LAB_SLURMCTLD_PORT="16857")
    started.env_sh.write_text(labctl.render_env_sh(started))
    recorded = started.env_sh.read_text()
    other_lab = settings_for(tmp_path, LAB_PG_PORT="55437", LAB_SLURMCTLD_PORT="16859")

    printed = labctl.lab_env_sh(other_lab)

    assert printed == recorded and started.env_sh.read_text() == recorded
    assert labctl.parse_env_sh(printed)["PGPORT"] == "55436"
    assert "LAB_PG_PORT, LAB_SLURMCTLD_PORT, PGPORT" in capsys.readouterr().err


def test_env_of_a_lab_never_started_comes_from_the_environment_and_writes_nothing(tmp_path):
    settings = settings_for(tmp_path / "never", LAB_PG_PORT="55437")
    assert labctl.lab_env_sh(settings) == labctl.render_env_sh(settings)
    assert not settings.env_sh.exists()


def test_node_config_comes_from_slurmd_c():
    assert labctl.parse_node_config(SLURMD_C) == {"cpus": "2", "real_memory": "24105"}
    with pytest.raises(labctl.LabError, match="RealMemory"):
        labctl.parse_node_config("NodeName=vm CPUs=2")


def test_slurm_conf_has_the_lab_essentials():
    settings = settings_for("/srv/lab", LAB_SLURMCTLD_PORT="16827", LAB_SLURMD_PORT="16828")
    values = labctl.slurm_template_values(settings, labctl.parse_node_config(SLURMD_C))
    conf = dict(
        line.split("=", 1)
        for line in labctl.render_template("slurm.conf.in", values).splitlines()
        if line and not line.startswith(("#", "NodeName", "PartitionName"))
    )
    assert conf["SlurmUser"] == "root"
    assert conf["SlurmctldPort"] == "16827" and conf["SlurmdPort"] == "16828"
    assert conf["AuthInfo"] == "socket=/srv/lab/run/munge/munge.socket.2"
    assert conf["ProctrackType"] == "proctrack/pgid" and conf["TaskPlugin"] == "task/none"
    assert conf["SelectType"] == "select/cons_tres"
    assert conf["SchedulerParameters"] == "batch_sched_delay=0,bf_interval=1,sched_interval=5"
    assert (conf["KillWait"], conf["MessageTimeout"], conf["MailProg"]) == ("5", "10", "/bin/true")
    assert conf["Epilog"] == "/srv/lab/slurm/epilog.sh"
    paths = [
        conf[key]
        for key in (
            "StateSaveLocation",
            "SlurmdSpoolDir",
            "SlurmctldPidFile",
            "SlurmdPidFile",
            "SlurmctldLogFile",
            "SlurmdLogFile",
        )
    ]
    assert all(path.startswith("/srv/lab/slurm/") for path in paths)


@pytest.mark.parametrize(
    "content, sleeps", [("2\n", "2"), ("0.5", "0.5"), ("", None), ("rm -rf /", None), (None, None)]
)
def test_epilog_sleeps_only_for_a_number(tmp_path, content, sleeps):
    settings = settings_for(str(tmp_path))
    if content is not None:
        settings.slurm_dir.mkdir(parents=True)
        settings.epilog_sleep_file.write_text(content)
    script = labctl.render_template(
        "epilog.sh.in", labctl.slurm_template_values(settings, {"cpus": "1", "real_memory": "1"})
    )
    # Print what the epilog would sleep instead of sleeping.
    traced = script.replace("exec /bin/sleep", "echo")
    result = subprocess.run(["sh", "-c", traced], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert (result.stdout.strip() or None) == sleeps


def test_postgres_options_are_quoted_for_pg_ctl_shell():
    settings = settings_for("/srv/lab")
    assert shlex.split(labctl.postgres_options(settings)) == [
        "-p",
        "55432",
        "-k",
        "/srv/lab/run/pg",
        "-c",
        "listen_addresses=127.0.0.1",
    ]


def test_client_files_carry_the_connection(tmp_path):
    settings = settings_for(str(tmp_path), LAB_CLUSTER_ID="abcde")
    config = labctl.render_arvados_config(settings, "0123abcd", dbname="other")
    assert "  abcde:\n    PostgreSQL:\n      Connection:\n" in config
    assert 'port: "55432"' in config and "dbname: other" in config
    assert 'password: "0123abcd"' in config
    assert labctl.render_pgpass(settings, "0123abcd").splitlines() == [
        "127.0.0.1:55432:*:arvados:0123abcd",
        "localhost:55432:*:arvados:0123abcd",
    ]
    database_yml = labctl.render_database_yml(settings, "0123abcd")
    assert "production:\n" in database_yml and "  port: 55432\n" in database_yml


def test_private_files_are_readable_by_root_only(tmp_path):
    path = tmp_path / "secret"
    path.write_text("old")
    path.chmod(0o644)
    labctl.write_private_file(path, "new")
    assert (path.read_text(), path.stat().st_mode & 0o777) == ("new", 0o600)


def test_a_process_record_round_trips_and_knows_its_process():
    record = labctl.ProcessRecord.of(os.getpid())
    assert labctl.ProcessRecord.parse(record.serialize()) == record
    assert record.is_alive()
    recycled = labctl.ProcessRecord(record.pid, record.start_time + 1, record.session)
    assert not recycled.is_alive()


def test_a_zombie_counts_as_gone():
    child = subprocess.Popen(["true"])
    record = labctl.ProcessRecord.of(child.pid)
    assert labctl.wait_until(lambda: labctl.proc_stat(child.pid)["state"] == "Z", 5)
    assert not record.is_alive()
    child.wait()


def test_terminate_stops_a_process_and_its_session():
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 61"], start_new_session=True)
    record = labctl.ProcessRecord.of(leader.pid)
    assert labctl.wait_until(lambda: len(labctl.processes_in_session(record.session)) == 2, 5)
    left_behind = [
        labctl.ProcessRecord.of(pid) for pid in labctl.processes_in_session(record.session) if pid != leader.pid
    ]
    labctl.terminate(record, timeout=5)
    leader.wait(timeout=5)
    assert [left for left in left_behind if left.is_alive()] == []


def test_stale_pid_files_are_removed(tmp_path):
    settings = settings_for(str(tmp_path))
    mine = labctl.ProcessRecord.of(os.getpid())
    labctl.write_record(settings, "munged", labctl.ProcessRecord(mine.pid, mine.start_time + 1, mine.session))
    assert labctl.live_record(settings, "munged") is None
    assert not labctl.pid_file(settings, "munged").exists()
    labctl.write_record(settings, "munged", mine)
    assert labctl.live_record(settings, "munged") == mine


def test_the_console_is_skipped_when_it_only_echoes_the_log():
    log = ["[2026-01-01T00:00:00] error: Error binding slurm stream socket: Address in use"]
    assert labctl.echoes_log(["slurmctld: error: Error binding slurm stream socket: Address in use"], log)
    assert not labctl.echoes_log(["slurmctld: fatal: Unable to process configuration file"], log)


def test_unsafe_lab_dirs_are_refused_before_anything_is_made(tmp_path):
    settings = settings_for(str(tmp_path / "a,b"))
    with pytest.raises(labctl.LabError, match="LAB_DIR"):
        labctl.prepare_directories(settings)
    assert not settings.lab_dir.exists()


def test_missing_ancestor_search_permission_is_added():
    # Not tmp_path: its own 0700 ancestors would be opened up too.
    base = Path(tempfile.mkdtemp(prefix="labctl-unit-"))
    try:
        base.chmod(0o755)
        closed = base / "closed"
        (closed / "inner").mkdir(parents=True)
        closed.chmod(0o700)
        changed = labctl.make_ancestors_traversable(closed / "inner" / "lab")
        assert changed == [closed]
        assert closed.stat().st_mode & 0o777 == 0o701
    finally:
        shutil.rmtree(base)
