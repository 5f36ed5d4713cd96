"""Every number option of the three modules has an upper bound in its option table, and the
module's documentation states that bound (issue 26: finite values past what PostgreSQL, sleep
or Slurm accept crashed or hung a run half way)."""

from __future__ import annotations

import re

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.doc_fragments.arvados_db import ModuleDocFragment
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import run as cancel_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import (
    NUMBER_TYPES,
    argument_spec,
    number_text,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import node_resume as slurm_node_resume
from ansible_collections.arvados_ops.recovery.plugins.modules import (
    arvados_fail_jobs,
    arvados_reconcile_info,
    slurm_job_cancel,
)
from ansible_collections.arvados_ops.recovery.plugins.modules import slurm_node_resume as slurm_node_resume_module

MODULES = {
    "arvados_fail_jobs": (arvados_fail_jobs, cleanup_run.ALL_OPTIONS),
    "arvados_reconcile_info": (arvados_reconcile_info, reconcile_run.ALL_OPTIONS),
    "slurm_job_cancel": (slurm_job_cancel, cancel_run.CANCEL_OPTIONS),
    "slurm_node_resume": (slurm_node_resume_module, slurm_node_resume.NODE_RESUME_OPTIONS),
}


def documented(module):
    options = {}
    if "arvados_db" in module.DOCUMENTATION:
        options.update(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    options.update(yaml.safe_load(module.DOCUMENTATION)["options"])
    return options


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_number_option_has_an_upper_bound(name):
    _module, options = MODULES[name]
    unbounded = [n for n, option in options.items() if option.type in NUMBER_TYPES and option.maximum is None]
    assert unbounded == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_documentation_states_each_bound(name):
    module, options = MODULES[name]
    docs = documented(module)
    for option, spec in options.items():
        if spec.maximum is None:
            continue
        text = " ".join(docs[option]["description"])
        assert re.search(r"\b(?:at most|to) V\(%s\)" % re.escape(number_text(spec.maximum)), text, re.I), option


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_bound_is_not_an_ansible_key(name):
    _module, options = MODULES[name]
    assert all("max" not in entry and "check" not in entry for entry in argument_spec(options).values())


def test_the_log_message_bound_is_documented_as_the_engine_applies_it():
    from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as cleanup_options

    text = " ".join(documented(arvados_fail_jobs)["log_message"]["description"])
    assert "At most %d bytes of UTF-8" % cleanup_options.MAX_SUMMARY_BYTES in text
    assert "(%d bytes)" % len(cleanup_options.UNRUNNABLE_NOTE.encode("utf-8")) in text
