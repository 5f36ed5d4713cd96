"""options: the one option layer. Its parse types and checks a value once, so the same
mistake gets the same message from every module's engine and from the command."""

from __future__ import annotations

import dataclasses
import inspect
import io

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import (
    CANCEL_OPTIONS,
    DEFAULT_MAX_CONCURRENT_SCANCEL,
    DEFAULT_MAX_SCANCEL_PER_SECOND,
    CancelRequest,
    CancelRequestError,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.run import build_request
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import cli as cleanup_cli
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import (
    CLEANUP_OPTIONS,
    CleanupOptions,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import (
    MAX_MESSAGE_CHARACTERS,
    ConfigError,
    RecoveryError,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.option_bounds import MAX_SLEEP_SECONDS
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import (
    EXCERPT_CHARACTERS,
    NOT_ASCII_NUMBER,
    Option,
    Range,
    argument_spec,
    auto_or_bool,
    check_given_numbers,
    count,
    excerpt,
    is_plain_decimal,
    option_fields,
    parse,
    seconds,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.settings import (
    CONNECTION_OPTIONS,
    DEFAULT_DB_WAIT,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.findings import SOURCE_OPTIONS
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.watch_cli import WATCH_OPTIONS
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.node_resume import NODE_RESUME_OPTIONS
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.runner import (
    COMMAND_TIMEOUT_OPTION,
    DEFAULT_COMMAND_TIMEOUT,
)

JOB = "zzzzz-8i9sb-000000000000001"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test"}

TABLE = {
    "wait": Option("float", 30.0, check=seconds(100)),
    "timeout": Option("float", check=seconds(100, above=True)),
    "rows": Option("int", 10, check=count(1000)),
    "flag": Option("bool", False),
    "mode": Option("str", "fast", choices=["fast", "slow"]),
    "names": Option("list", elements="str"),
    "password": Option("str", no_log=True),
    "live": Option("raw", "auto", check=auto_or_bool),
}


def message_of(call, *args, **kwargs):
    with pytest.raises(ConfigError) as raised:
        call(*args, **kwargs)
    return str(raised.value)


def command_error(argv):
    stderr = io.StringIO()
    reporter = cleanup_cli.Reporter(stream=stderr, journald=False)
    argv = ["--config", "", "--database-yml", "", "--db-name", "x", "--cancel-slurm-jobs", "false"] + argv
    assert cleanup_cli.main(argv, stdout=io.StringIO(), reporter=reporter) == 1
    return stderr.getvalue()[len("arvados-fail-jobs: ") :].rstrip("\n")


def test_parse_gives_every_option_its_default_or_its_checked_value():
    parsed = parse(TABLE, {"wait": 0, "rows": 5, "names": ["a"], "timeout": None})
    assert parsed == {
        "wait": 0.0,
        "timeout": None,
        "rows": 5,
        "flag": False,
        "mode": "fast",
        "names": ["a"],
        "password": None,
        "live": "auto",
    }
    assert isinstance(parsed["wait"], float)


def test_unknown_names_are_refused_together():
    assert message_of(parse, TABLE, {"rows": 1, "colour": 1, "bogus": 2}) == "unknown option(s): bogus, colour"


def test_a_required_option_missing_or_none_is_refused_by_name():
    table = dict(TABLE, nodes=Option("list", elements="str", required=True), zone=Option("str", required=True))
    assert message_of(parse, table, {"rows": 1}) == "missing required option(s): nodes, zone"
    assert message_of(parse, table, {"nodes": None, "zone": "a"}) == "missing required option(s): nodes"
    assert parse(table, {"nodes": ["c1"], "zone": "a"})["nodes"] == ["c1"]


def test_an_unknown_name_is_refused_before_a_missing_required_one():
    table = {"nodes": Option("list", elements="str", required=True)}
    assert message_of(parse, table, {"colour": 1}) == "unknown option(s): colour"


def test_a_required_option_is_required_in_the_argument_spec_and_has_no_default():
    table = {"nodes": Option("list", elements="str", aliases=["node"], required=True), "zone": Option("str")}
    assert argument_spec(table) == {
        "nodes": {"type": "list", "required": True, "elements": "str", "aliases": ["node"]},
        "zone": {"type": "str"},
    }
    with pytest.raises(ValueError, match="no default"):
        Option("str", "a", required=True)


def test_a_list_default_is_never_shared_with_a_caller():
    table = {"kinds": Option("list", ["a", "b"], elements="str")}
    parse(table, {})["kinds"].append("c")
    assert parse(table, {})["kinds"] == ["a", "b"]


@pytest.mark.parametrize(
    "given, message",
    [
        ({"wait": -1}, "option wait must be at least 0, got -1.0"),
        ({"wait": float("nan")}, "option wait must be a finite number, got nan"),
        ({"wait": float("-inf")}, "option wait must be a finite number, got -inf"),
        ({"wait": 100.5}, "option wait must be at most 100, got 100.5"),
        ({"timeout": 0}, "option timeout must be above 0, got 0.0"),
        ({"rows": 0}, "option rows must be at least 1, got 0"),
        ({"rows": 2.5}, "option rows must be of type int, got 2.5"),
        ({"rows": True}, "option rows must be of type int, got True"),
        ({"rows": "5"}, "option rows must be of type int, got '5'"),
        ({"flag": "yes"}, "option flag must be of type bool, got 'yes'"),
        ({"mode": "medium"}, "option mode must be one of fast, slow, got 'medium'"),
        ({"names": "a"}, "option names must be of type list, got 'a'"),
        ({"names": ["a", 1]}, "option names must be of type list, got ['a', 1]"),
        (
            {"names": ["a\x00b"]},
            "option names must not contain a NUL character (\\x00), which PostgreSQL text cannot hold, got 'a\\x00b'",
        ),  # fmt: skip
        ({"live": "maybe"}, "option live must be auto, true or false, got 'maybe'"),
    ],
)
def test_a_typed_value_is_checked_not_converted(given, message):
    assert message_of(parse, TABLE, given) == message


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"flag": "yes"}, True),
        ({"flag": "Off"}, False),
        ({"rows": "5"}, 5),
        ({"rows": "1e3"}, 1000),
        ({"rows": 7.0}, 7),
        ({"wait": "2.5"}, 2.5),
        ({"names": "a"}, ["a"]),
        ({"live": "no"}, False),
    ],
)
def test_text_from_a_file_or_a_flag_is_converted_as_ansible_would(given, expected):
    ((name, _value),) = given.items()
    assert parse(TABLE, given, from_text=True)[name] == expected


def test_text_that_is_no_value_of_the_type_is_refused_by_name():
    assert (
        message_of(parse, TABLE, {"rows": "many\n"}, from_text=True) == "option rows must be of type int, got 'many\\n'"
    )
    assert (
        message_of(parse, TABLE, {"flag": "maybe"}, from_text=True) == "option flag must be of type bool, got 'maybe'"
    )
    assert (
        message_of(parse, TABLE, {"rows": float("inf")}, from_text=True) == "option rows must be of type int, got inf"
    )


@pytest.mark.parametrize("secret", [54321, "s3cr3t\x00", "s3cr3t\ud800"])
def test_a_no_log_value_is_never_shown(secret):
    message = message_of(parse, TABLE, {"password": secret})
    assert message.startswith("option password must ")
    assert "got" not in message and "s3cr3t" not in message and "54321" not in message


def test_a_no_log_value_outside_its_choices_or_range_is_not_shown_either():
    table = {"key": Option("str", choices=["s3cret"], no_log=True), "pin": Option("int", no_log=True, check=count(9))}
    assert message_of(parse, table, {"key": "hunter2"}) == "option key must be one of s3cret"
    assert message_of(parse, table, {"pin": 1234}) == "option pin must be at most 9"


def test_the_argument_spec_is_the_table_without_help_checks_and_none_defaults():
    table = {
        "db_host": Option("str", aliases=["login_host"], help="database host"),
        "rows": Option("int", 10, check=count(1000), help="rows per batch"),
        "password": Option("str", no_log=True),
        "kinds": Option("list", ["a"], elements="str", choices=["a", "b"]),
    }
    assert argument_spec(table) == {
        "db_host": {"type": "str", "aliases": ["login_host"]},
        "rows": {"type": "int", "default": 10},
        "password": {"type": "str", "no_log": True},
        "kinds": {"type": "list", "default": ["a"], "elements": "str", "choices": ["a", "b"]},
    }


def test_an_option_reads_as_its_spec_and_says_its_bound():
    option = Option("float", 2.0, help="pause", check=Range(60, 1, above=True))
    assert dict(option) == {"type": "float", "default": 2.0, "help": "pause"}
    assert option.maximum == 60
    assert Option("str").maximum is None


# -- the same mistake, the same message, from every engine and from the command -----------


def test_a_negative_wait_gets_one_message_from_both_database_modules_and_the_command():
    expected = "option db_wait must be at least 0, got -1.0"
    assert message_of(cleanup_run.with_defaults, dict(NO_FILES, db_wait=-1.0)) == expected
    assert message_of(reconcile_run.check_params, dict(NO_FILES, db_wait=-1.0, squeue_path="/bin/true")) == expected
    assert command_error(["--db-wait=-1"]) == expected


def test_a_zero_batch_size_gets_one_message_from_both_database_modules_and_the_command():
    expected = "option batch_size must be at least 1, got 0"
    assert message_of(cleanup_run.with_defaults, dict(NO_FILES, batch_size=0)) == expected
    assert message_of(reconcile_run.check_params, dict(NO_FILES, batch_size=0, squeue_path="/bin/true")) == expected
    assert message_of(CleanupOptions, batch_size=0) == expected
    assert command_error(["--batch-size", "0"]) == expected


def test_a_zero_command_timeout_gets_one_message_from_the_reconciliation_and_the_slurm_module():
    expected = "option command_timeout must be above 0, got 0.0"
    assert message_of(reconcile_run.check_params, dict(NO_FILES, command_timeout=0.0, squeue_path="/bin/true")) == (
        expected
    )
    assert message_of(build_request, {"name": [JOB], "command_timeout": 0.0}) == expected
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(names=(JOB,), command_timeout=0.0)
    assert str(raised.value) == expected


def test_a_port_past_its_bound_gets_one_message_from_both_database_modules_and_the_command():
    expected = "option db_port must be at most 65535, got 70000"
    assert message_of(cleanup_run.with_defaults, dict(NO_FILES, db_port=70000)) == expected
    assert message_of(reconcile_run.check_params, dict(NO_FILES, db_port=70000, squeue_path="/bin/true")) == expected
    assert command_error(["--db-port", "70000"]) == expected


def test_the_slurm_settings_of_the_cleanup_are_named_by_the_cleanups_option():
    # CancelRequest would say timeout; the cleanup's option is slurm_timeout.
    assert message_of(cleanup_run.with_defaults, dict(NO_FILES, slurm_timeout=0.0)) == (
        "option slurm_timeout must be above 0, got 0.0"
    )


# -- numbers written as text: ASCII digits only -----------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"rows": "5"}, 5),
        ({"rows": " 5\n"}, 5),
        ({"rows": "+5"}, 5),
        ({"rows": "007"}, 7),
        ({"rows": "1e3"}, 1000),
        ({"rows": "1E3"}, 1000),
        ({"wait": "2.5"}, 2.5),
        ({"wait": ".5"}, 0.5),
        ({"wait": "5."}, 5.0),
        ({"wait": "1e-1"}, 0.1),
    ],
)
def test_a_number_in_ascii_digits_is_read(given, expected):
    ((name, _value),) = given.items()
    assert parse(TABLE, given, from_text=True)[name] == expected


@pytest.mark.parametrize(
    "name, text",
    [
        ("rows", "\u0665"),  # ARABIC-INDIC DIGIT FIVE: int() reads it as 5
        ("rows", "1_000"),  # int() reads it as 1000
        ("rows", "\uff15"),  # FULLWIDTH DIGIT FIVE
        ("rows", "\u0967\u0966"),  # DEVANAGARI 10
        ("wait", "2_5.0"),
        ("wait", "\u0662.\u0665"),
        ("rows", "1_0e2"),
    ],
)
def test_a_number_in_other_digits_or_with_underscores_is_refused_by_name(name, text):
    assert message_of(parse, TABLE, {name: text}, from_text=True) == (
        "option %s must be a number written with the ASCII digits 0-9 (no underscores, no other digits), got %s"
        % (name, excerpt(text))
    )


@pytest.mark.parametrize("text", ["0x10", "1:30", "five", "", "1 000", "--5"])
def test_text_python_cannot_read_as_a_number_keeps_the_type_message(text):
    assert message_of(parse, TABLE, {"rows": text}, from_text=True) == "option rows must be of type int, got %s" % (
        excerpt(text)
    )


def test_a_long_value_is_cut_in_the_message():
    text = "9" * 100000 + "x"
    message = message_of(parse, TABLE, {"rows": text}, from_text=True)
    assert message == "option rows must be of type int, got '%s...' (100001 characters)" % ("9" * EXCERPT_CHARACTERS)
    assert len(message) < 200


def test_every_recovery_error_is_cut_past_its_maximum():
    message = str(ConfigError("squeue %s is not executable" % ("x" * 100000)))
    assert len(message) < MAX_MESSAGE_CHARACTERS + 40
    assert message == "squeue %s... (100025 characters)" % ("x" * (MAX_MESSAGE_CHARACTERS - len("squeue ")))
    assert str(ConfigError("short\nline")) == "short line"


def test_a_long_job_uuid_is_cut_in_the_message():
    with pytest.raises(RecoveryError) as raised:
        CleanupOptions(uuids=["x" * 100000])
    assert str(raised.value) == "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): '%s...' (100000 characters)" % (
        "x" * 60
    )


def test_check_given_numbers_refuses_what_ansible_would_convert_under_the_name_or_an_alias():
    table = {
        "port": Option("int", aliases=["p"], check=count(65535)),
        "wait": Option("float", 1.0, check=seconds(60)),
        "name": Option("str"),
    }
    check_given_numbers(table, {"port": "5432", "p": 5432, "wait": " 2.5 ", "name": "\u0665"})
    check_given_numbers(table, {})
    for given, message in (
        ({"p": "\u0665\u0664"}, "option port %s, got '\u0665\u0664'" % NOT_ASCII_NUMBER),
        ({"wait": "1_0"}, "option wait %s, got '1_0'" % NOT_ASCII_NUMBER),
        ({"port": "70000"}, "option port must be at most 65535, got 70000"),
    ):
        with pytest.raises(ConfigError) as refused:
            check_given_numbers(table, given)
        assert str(refused.value) == message


@pytest.mark.parametrize("text", ["0", "7", "-12", "+3.5", " 10\n", ".5", "1e3", "2.", "inf", "NaN", "0.25"])
def test_a_plain_decimal_is_what_yaml_and_python_read_as_the_same_number(text):
    assert is_plain_decimal(text)


@pytest.mark.parametrize("text", ["017", "1_000", "0x1F", "0b1", "1:20", "\u0665", "", "-", "1e", "00.5"])
def test_texts_yaml_or_python_read_as_another_number_are_not_plain_decimals(text):
    assert not is_plain_decimal(text)


# -- each default defined once: the tables that share an option share its definition -----

ALL_TABLES = {
    "connection": CONNECTION_OPTIONS,
    "slurm_job_cancel": CANCEL_OPTIONS,
    "slurm_node_resume": NODE_RESUME_OPTIONS,
    "cleanup": CLEANUP_OPTIONS,
    "arvados_fail_jobs": cleanup_run.FAIL_JOBS_OPTIONS,
    "arvados_reconcile_info": reconcile_run.RECONCILE_OPTIONS,
    "arvados-recovery-watch": WATCH_OPTIONS,
    "findings": SOURCE_OPTIONS,
}
# Options of one name whose defaults differ on purpose: the watch asks the dispatcher's unit
# on its own host, the event source rarely runs there; the reconciliation reads in larger
# batches than the cleanup writes.
DIFFERENT_ON_PURPOSE = {"dispatcher_unit", "batch_size"}


def test_an_option_in_several_tables_has_one_default_in_all():
    defaults = {}
    for table_name, table in ALL_TABLES.items():
        for name, option in table.items():
            if name not in DIFFERENT_ON_PURPOSE:
                defaults.setdefault(name, {})[table_name] = option.default
    copied = {name: seen for name, seen in defaults.items() if len(seen) > 1 and len(set(map(repr, seen.values()))) > 1}
    assert copied == {}


def test_the_slurm_tables_share_one_command_timeout_and_the_request_defaults_to_it():
    tables = (CANCEL_OPTIONS, NODE_RESUME_OPTIONS, reconcile_run.RECONCILE_OPTIONS)
    assert all(table["command_timeout"] is COMMAND_TIMEOUT_OPTION for table in tables)
    assert CancelRequest().command_timeout == DEFAULT_COMMAND_TIMEOUT == COMMAND_TIMEOUT_OPTION.default == 10.0


def test_both_database_engines_wait_for_the_database_as_long_by_default():
    for table in (cleanup_run.FAIL_JOBS_OPTIONS, reconcile_run.RECONCILE_OPTIONS):
        assert table["db_wait"].default is DEFAULT_DB_WAIT
        assert repr(table["db_wait"].check) == repr(seconds(MAX_SLEEP_SECONDS))
    assert DEFAULT_DB_WAIT == 30.0


def test_the_cleanups_scancel_pace_is_the_cancel_requests():
    for option, field in (
        ("slurm_max_scancel_per_second", "max_scancel_per_second"),
        ("slurm_max_concurrent_scancel", "max_concurrent_scancel"),
    ):
        cleanup = cleanup_run.FAIL_JOBS_OPTIONS[option]
        assert cleanup.default == getattr(CancelRequest(), field) == CANCEL_OPTIONS[field].default
        assert cleanup.check is CANCEL_OPTIONS[field].check
    assert (DEFAULT_MAX_SCANCEL_PER_SECOND, DEFAULT_MAX_CONCURRENT_SCANCEL) == (10.0, 3)


def test_the_event_source_bounds_systemctl_as_the_watch_does():
    assert SOURCE_OPTIONS["systemctl_timeout"] is WATCH_OPTIONS["systemctl_timeout"]


# -- every checked options object built from its table by option_fields ------------------


def test_option_fields_gives_each_named_option_under_its_fields_name():
    values = parse(TABLE, {"rows": 5})
    assert option_fields(values, ["rows", "mode"]) == {"rows": 5, "mode": "fast"}
    assert option_fields(values, TABLE, {"names": "targets"})["targets"] is None
    with pytest.raises(KeyError):
        option_fields(values, ["colour"])


def test_every_reconcile_option_is_a_field_of_reconcile_options():
    fields = {field.name for field in dataclasses.fields(reconcile_run.ReconcileOptions)}
    assert fields == set(reconcile_run.RECONCILE_OPTIONS)


def test_the_cleanups_fields_are_options_of_its_table_and_arguments_of_cleanup_options():
    arguments = set(inspect.signature(CleanupOptions).parameters)
    assert set(cleanup_run.CLEANUP_FIELDS) <= set(cleanup_run.FAIL_JOBS_OPTIONS)
    assert set(cleanup_run.CLEANUP_FIELDS) - {"log_message"} | {"message"} <= arguments


def test_the_cancel_options_reach_the_request_under_its_field_names():
    request = build_request({"name": [JOB], "job_id": ["7"], "command_timeout": 4, "timeout": None})
    assert (request.names, request.job_ids, request.command_timeout) == ((JOB,), ("7",), 4.0)
    assert request.timeout == CancelRequest(names=(JOB,), job_ids=("7",)).timeout
