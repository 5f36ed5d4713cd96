"""The database modules' documentation against the option tables they are built from:
every option documented with the type, default, choices and aliases the module takes
(the arvados_db fragment's options included), and nothing documented that it does not take."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.doc_fragments.arvados_db import ModuleDocFragment
from ansible_collections.arvados_ops.recovery.plugins.module_utils import fail_jobs_run, reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils.options import argument_spec
from ansible_collections.arvados_ops.recovery.plugins.modules import arvados_fail_jobs, arvados_reconcile_info

MODULES = {
    "arvados_fail_jobs": (arvados_fail_jobs, fail_jobs_run.ALL_OPTIONS),
    "arvados_reconcile_info": (arvados_reconcile_info, reconcile_run.ALL_OPTIONS),
}


def documented_options(module):
    options = dict(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    options.update(yaml.safe_load(module.DOCUMENTATION)["options"])
    return options


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_option_is_documented_as_the_module_takes_it(name):
    module, options = MODULES[name]
    documented = documented_options(module)
    spec = argument_spec(options)
    assert sorted(documented) == sorted(spec)
    for option, entry in spec.items():
        doc = documented[option]
        for key in ("type", "default", "choices", "aliases", "elements"):
            assert doc.get(key) == entry.get(key), "%s: %s documented %r, taken %r" % (
                option,
                key,
                doc.get(key),
                entry.get(key),
            )
