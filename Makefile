# arvados_ops.recovery: the two commands a user needs are `make demo` and `make test`.
# Everything else here is a piece of those two. Run as root on Debian 12.

PYTHON := .venv/bin/python
LABCTL := $(PYTHON) lab/labctl.py

.PHONY: help deps venv test unit integration integration-cores examples sanity versions lint molecule releases molecule-releases build-check docs release-check demo \
        bench bench-full lab-start lab-stop lab-status clean

help:
	@echo "make demo         bring up the local lab, seed a cluster that just rebooted, recover it"
	@echo "make test         install what is missing, run every test stage (starts/stops the lab)"
	@echo "make unit | integration | integration-cores | examples | docs | sanity | versions | lint | molecule | releases | build-check"
	@echo "                  one stage alone"
	@echo "                  (releases: scancel --ctld on Debian 13's Slurm, the cluster scenario's light verify"
	@echo "                  on Debian 11 and 13)"
	@echo "                  (versions: the unit tests that run ansible-core, and sanity, on ansible-core 2.16 to 2.21, Python 3.8 and the newest;"
	@echo "                  integration-cores: the recovery playbooks on the lab with ansible-core 2.16 and 2.21;"
	@echo "                  examples: every fenced example of README.md, playbooks/, roles/ and docs/docsite/ run on the lab;"
	@echo "                  docs: the documentation site into .build/docs/build/html, any Sphinx warning an error)"
	@echo "make molecule-releases  the cluster scenario's full verify on Debian 11 and 13 (not in make test)"
	@echo "make release-check  before a release's tag (RELEASING.md): changelog, version everywhere, artifact"
	@echo "make bench        every benchmark comparison in one table, quick sizes (a few minutes; starts/stops the lab)"
	@echo "make bench-full   the same at the sizes of issue 40 (1,000,000 jobs: an hour or more)"
	@echo "make lab-start | lab-stop | lab-status                  the lab by hand"

deps:
	@scripts/install-deps.sh

# The project virtualenv alone: no apt, no root.
venv:
	@scripts/install-deps.sh venv

test: deps
	@scripts/run-tests.sh

unit: venv
	@scripts/run-tests.sh unit

integration integration-cores examples sanity versions lint molecule releases molecule-releases: deps
	@scripts/run-tests.sh $@

build-check: deps
	@scripts/run-tests.sh build

# The documentation site needs only the virtualenv, as the unit tests do.
docs: venv
	@scripts/run-tests.sh docs

# RELEASING.md: what must hold before a release's tag is pushed.
release-check: venv
	@scripts/release-check.sh

demo: deps
	@scripts/demo.sh

bench: deps
	@scripts/bench.sh

bench-full: deps
	@scripts/bench.sh --full

lab-start: deps
	@$(LABCTL) start

lab-stop:
	@$(LABCTL) stop

lab-status:
	@$(LABCTL) status

clean:
	rm -rf .build tests/output
