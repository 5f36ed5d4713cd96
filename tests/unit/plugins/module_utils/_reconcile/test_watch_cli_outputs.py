# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""arvados-recovery-watch's outputs (issue 34 item 4 and Low 9, issue 42 items 2 and 5), on
real paths: a symlink, a device, a FIFO or a directory given as --metrics-file or --json is
refused before anything is read or written, and left as it was; options refused before the
read exit 2 and write nothing; a failed read's reason survives a failure gauge that cannot
be written; a good read's result survives gauges that cannot be written."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import Option
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_cli, watch_metrics
from tests.unit.plugins.module_utils._reconcile.test_watch_cli import CONTAINER, FakeRead, P, result, run
from tests.unit.plugins.module_utils.prometheus_samples import samples


def fingerprint(path):
    """What must not change: the name's own lstat (a device's rdev, a link's inode) and, for
    a link, where it points."""
    status = os.lstat(path)
    link = os.readlink(path) if os.path.islink(path) else None
    return (status.st_mode, status.st_ino, status.st_dev, status.st_rdev, status.st_size, status.st_mtime_ns, link)


@pytest.fixture
def elsewhere(tmp_path):
    """A regular file outside the output's directory, and a symlink to it."""
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    target = target_dir / "precious.txt"
    target.write_text("not to be replaced\n")
    link = tmp_path / "out" / "link"
    link.parent.mkdir()
    link.symlink_to(target)
    return link, target


def refused(argv, expected_words):
    read = FakeRead(result())
    code, stdout, stderr = run(argv, read)
    assert (code, stdout, read.params) == (2, "", [])
    for words in expected_words:
        assert words in stderr
    assert "nothing was written" in stderr
    return stderr


@pytest.mark.parametrize("flag, option", [("--metrics-file", "option metrics_file"), ("--json", "--json")])
def test_a_symlink_as_an_output_is_refused_and_neither_it_nor_its_target_changes(tmp_path, elsewhere, flag, option):
    link, target = elsewhere
    prom = tmp_path / "x.prom"
    before = (fingerprint(link), fingerprint(target), target.read_bytes())
    argv = ["--metrics-file", str(prom)] + [flag, str(link)] if flag == "--json" else [flag, str(link)]
    refused(argv, ["%s %s is a symlink to '%s'" % (option, link, target), "regular file or absent"])
    assert (fingerprint(link), fingerprint(target), target.read_bytes()) == before
    assert sorted(os.listdir(link.parent)) == ["link"]
    assert not prom.exists()


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
@pytest.mark.parametrize("flag, option", [("--metrics-file", "option metrics_file"), ("--json", "--json")])
def test_a_device_as_an_output_is_refused_and_left_as_it_was(tmp_path, device, flag, option):
    if not os.path.exists(device):
        pytest.skip("%s is missing here" % device)
    prom = tmp_path / "x.prom"
    before = fingerprint(device)
    argv = ["--metrics-file", str(prom), "--json", device] if flag == "--json" else [flag, device]
    refused(argv, ["%s %s is a character device" % (option, device)])
    assert fingerprint(device) == before
    assert not prom.exists()


def test_a_fifo_as_the_metrics_file_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "x.prom"
    os.mkfifo(str(fifo))
    before = fingerprint(fifo)
    # Opening it (to keep the last gauges) would block for ever: the test would hang.
    refused(["--metrics-file", str(fifo)], ["option metrics_file %s is a FIFO (named pipe)" % fifo])
    assert fingerprint(fifo) == before
    assert sorted(os.listdir(tmp_path)) == ["x.prom"]


@pytest.mark.parametrize("flag, option", [("--metrics-file", "option metrics_file"), ("--json", "--json")])
def test_a_directory_as_an_output_is_refused_and_left_as_it_was(tmp_path, flag, option):
    directory = tmp_path / "result.json"
    directory.mkdir()
    (directory / "inside").write_text("kept")
    prom = tmp_path / "x.prom"
    before = fingerprint(directory)
    argv = ["--metrics-file", str(prom), "--json", str(directory)] if flag == "--json" else [flag, str(directory)]
    refused(argv, ["%s %s is a directory" % (option, directory)])
    assert fingerprint(directory) == before
    assert [entry.name for entry in directory.iterdir()] == ["inside"]
    assert not prom.exists()


def test_the_options_file_can_name_a_refused_output_too(tmp_path, elsewhere):
    link, target = elsewhere
    options_file = tmp_path / "watch.yml"
    options_file.write_text("metrics_file: %s\n" % link)
    options_file.chmod(0o600)
    refused(["--options-file", str(options_file)], ["option metrics_file %s is a symlink" % link])
    assert target.read_text() == "not to be replaced\n"


def test_regular_files_and_absent_ones_are_written(tmp_path):
    prom, out = tmp_path / "x.prom", tmp_path / "r.json"
    prom.write_text("# old\n")
    assert run(["--metrics-file", str(prom), "--json", str(out)], FakeRead(result()))[0] == 0
    assert samples(prom.read_text())[(P + "watch_read_failed", ())] == 0
    assert json.loads(out.read_text())["orphaned_containers"][0]["uuid"] == CONTAINER


def test_a_link_put_in_place_during_the_write_is_not_replaced(tmp_path, elsewhere):
    # Looked at again just before the rename: the link made meanwhile stays a link.
    link, target = elsewhere
    path = link.parent / "result.json"

    def pieces():
        yield "{"
        path.symlink_to(target)
        yield "}"

    with pytest.raises(watch_metrics.OutputPathError, match="is a symlink to"):
        watch_metrics.write_pieces_atomically(str(path), pieces(), what="--json")
    assert os.readlink(path) == str(target)
    assert target.read_text() == "not to be replaced\n"
    assert sorted(os.listdir(link.parent)) == ["link", "result.json"]


# Options the table accepts but the read's own checks refuse (reconcile_run.check_params,
# the real one): before issue 34 they wrote the failure gauge and exited 1.
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--cluster-prefix", "zz"], "cluster_prefix:"),
        (
            ["--slurm-user", "a b"],
            "option slurm_user must be a Slurm user name ([A-Za-z0-9_.@-], not starting with @ or -), got 'a b'",
        ),
        (
            ["--slurm-clusters", "a;b"],
            "option slurm_clusters must be Slurm cluster names ([A-Za-z0-9_.-]) separated by commas, got 'a;b'",
        ),
        (["--slurm-user", "root", "--slurm-users", '{"jobs": "crunch"}'], "mutually exclusive"),
        (["--squeue-path", "/nonexistent/squeue"], "/nonexistent/squeue: cannot be run"),
        (["--arvados-version", "two"], "arvados_version"),
        (["--config-file", "/nonexistent/config.yml"], "/nonexistent/config.yml"),
    ],
)
def test_options_refused_before_the_read_exit_2_and_write_nothing(tmp_path, flags, message):
    prom = tmp_path / "x.prom"
    prom.write_text("# the last good gauges\n")
    before = fingerprint(prom)
    read = FakeRead(result())
    base = ["--metrics-file", str(prom), "--json", str(tmp_path / "r.json"), "--config-file", "", "--db-name", "x"]
    code, stdout, stderr = run(base + flags, read, check=watch_cli.check_params)
    assert (code, stdout, read.params) == (2, "", [])
    assert message in stderr and "read failed" not in stderr
    assert fingerprint(prom) == before and prom.read_text() == "# the last good gauges\n"
    assert sorted(os.listdir(tmp_path)) == ["x.prom"]


def test_options_the_read_checks_accept_reach_the_read(tmp_path):
    prom = tmp_path / "x.prom"
    read = FakeRead(result())
    argv = ["--metrics-file", str(prom), "--config-file", "", "--db-name", "x", "--squeue-path", "/bin/true"]
    code = run(argv + ["--no-report-nodes"], read, check=watch_cli.check_params)[0]
    assert code == 0 and len(read.params) == 1


def failing_write(monkeypatch, function, number, text):
    def fail(*args, **kwargs):
        raise OSError(number, text)

    monkeypatch.setattr(watch_metrics, function, fail)


@pytest.mark.parametrize("number, text", [(errno.EROFS, "Read-only file system"), (errno.ENOSPC, "No space left")])
def test_a_failed_read_is_told_even_when_its_failure_gauge_cannot_be_written(tmp_path, monkeypatch, number, text):
    prom = tmp_path / "x.prom"
    failing_write(monkeypatch, "write_failure", number, text)
    code, stdout, stderr = run(["--metrics-file", str(prom)], FakeRead(RecoveryError("slurmctld down")))
    assert code == 1
    assert "read failed" in stderr and "slurmctld down" in stderr
    assert "the failure gauge could not be written: cannot write %s: %s" % (prom, text) in stderr
    assert "last good gauges are kept" not in stderr
    answer = json.loads(stdout)
    assert answer["failed"] is True and "slurmctld down" in answer["msg"]


def test_a_bug_in_the_read_is_raised_with_the_gauge_failure_said(tmp_path, monkeypatch):
    failing_write(monkeypatch, "write_failure", errno.EROFS, "Read-only file system")
    stderr = []
    reporter = watch_cli.Reporter(stream=_Lines(stderr), journald=False)
    with pytest.raises(KeyError, match="a bug"):
        watch_cli.main(
            ["--metrics-file", str(tmp_path / "x.prom")],
            reporter=reporter,
            check=lambda params: None,
            read=FakeRead(KeyError("a bug")),
            unit_active=lambda unit, timeout: None,
        )
    assert "the failure gauge could not be written" in "".join(stderr)


class _Lines:
    def __init__(self, into):
        self.into = into

    def write(self, text):
        self.into.append(text)

    def flush(self):
        pass


def test_a_good_read_whose_gauges_cannot_be_written_still_prints_its_result(tmp_path, monkeypatch):
    prom = tmp_path / "x.prom"
    failing_write(monkeypatch, "write_success", errno.ENOSPC, "No space left on device")
    code, stdout, stderr = run(["--metrics-file", str(prom)], FakeRead(result()))
    assert code == 1
    assert json.loads(stdout)["orphaned_containers"][0]["uuid"] == CONTAINER
    assert "the read succeeded" in stderr
    assert "cannot write %s: No space left on device (in directory %s)" % (prom, tmp_path) in stderr


def test_no_metrics_file_writes_no_gauges_and_prints_the_result(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run(["--metrics-file", ""], FakeRead(result()))
    assert (code, stderr) == (0, "")
    assert json.loads(stdout)["orphaned_containers"][0]["uuid"] == CONTAINER
    assert os.listdir(tmp_path) == []


def test_the_default_metrics_file_on_a_host_without_its_directory_prints_the_result(tmp_path, monkeypatch):
    # Issue 42 item 2: README's `arvados-recovery-watch --options-file ...` on a host
    # without node_exporter's textfile directory.
    default = tmp_path / "node-exporter" / "arvados_recovery.prom"
    monkeypatch.setitem(watch_cli.ALL_OPTIONS, "metrics_file", Option("path", str(default)))
    code, stdout, stderr = run([], FakeRead(result()))
    assert code == 0
    assert json.loads(stdout)["orphaned_containers"][0]["uuid"] == CONTAINER
    assert "no gauges written: %s does not exist" % default.parent in stderr
    assert not default.parent.exists()
    # Named, the same file is an error: whoever named it wants the gauges.
    code, stdout, stderr = run(["--metrics-file", str(default)], FakeRead(result()))
    assert code == 1 and json.loads(stdout)["orphaned_containers"]
    assert "its directory %s does not exist" % default.parent in stderr
    # The directory there, the default is written.
    default.parent.mkdir()
    code, stdout, stderr = run([], FakeRead(result()))
    assert (code, stderr) == (0, "")
    assert samples(default.read_text())[(P + "watch_read_failed", ())] == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--kinds", "jobs,containers"],
        ["--kinds", "jobs", "--kinds", "containers"],
        ["--kinds", "containers, jobs"],
    ],
)
def test_kinds_take_a_comma_list_or_the_flag_repeated(tmp_path, argv):
    read = FakeRead(result())
    code = run(["--metrics-file", str(tmp_path / "x.prom")] + argv, read)[0]
    assert code == 0
    assert sorted(read.params[0]["kinds"]) == ["containers", "jobs"]


def test_kinds_as_a_comma_list_in_the_options_file(tmp_path):
    options_file = tmp_path / "watch.yml"
    options_file.write_text("kinds: jobs,containers\nmetrics_file: %s\n" % (tmp_path / "x.prom"))
    options_file.chmod(0o600)
    read = FakeRead(result())
    assert run(["--options-file", str(options_file)], read)[0] == 0
    assert read.params[0]["kinds"] == ["jobs", "containers"]


def test_a_kind_that_is_none_is_still_refused_by_name(tmp_path):
    read = FakeRead(result())
    code, _stdout, stderr = run(["--metrics-file", str(tmp_path / "x.prom"), "--kinds", "jobs,pipelines"], read)
    assert (code, read.params) == (2, [])
    assert "option kinds must be one of jobs, containers, got 'pipelines'" in stderr


def test_a_failed_read_over_a_previous_file_not_utf8_writes_the_failure_gauge_and_says_so(tmp_path):
    prom = tmp_path / "x.prom"
    prom.write_bytes(b"\xff\xfe\n")
    code, stdout, stderr = run(["--metrics-file", str(prom)], FakeRead(RecoveryError("slurmctld down")))
    message = (
        "read failed (option metrics_file %s was not UTF-8 text (byte 0), so its last gauges could not be kept: "
        "taken as no previous state, replaced by the status gauges alone, arvados_recovery_watch_read_failed is 1): "
        "slurmctld down" % prom
    )
    assert code == 1
    assert stderr == "arvados-recovery-watch: %s\n" % message
    assert json.loads(stdout) == {"changed": False, "failed": True, "msg": message}
    assert samples(prom.read_text())[("arvados_recovery_watch_read_failed", ())] == 1


def test_a_good_read_replaces_a_previous_file_not_utf8_without_reading_it(tmp_path):
    prom = tmp_path / "x.prom"
    prom.write_bytes(b"\xff\xfe\n")
    code, _stdout, stderr = run(["--metrics-file", str(prom)], FakeRead(result()))
    assert (code, stderr) == (0, "")
    assert samples(prom.read_text())[("arvados_recovery_watch_read_failed", ())] == 0
