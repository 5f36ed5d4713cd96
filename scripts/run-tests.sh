#!/usr/bin/env bash
# Runs the named test stages (default: all of them) and reports each one.
# Starts the lab when a stage needs it and stops it afterwards, even when a stage fails,
# but only if this run started it: a lab a developer brought up by hand stays up.
#
# Named stages run one after the other. All of them (no argument, as `make test` runs
# them) run in three lanes at once, because the lab and cluster stages spend much of their
# time waiting for Slurm, PostgreSQL and systemd in containers, with a core idle:
#   lab lane:     integration:lab (the integration tests but the container one below),
#                 integration-cores (the recovery playbooks on ansible-core 2.16 and 2.21),
#                 examples (every fenced example of the user docs, run), then the one-host
#                 scenarios of Arvados' releases (release_*: they use the lab's PostgreSQL)
#   tools lane:   unit, sanity, versions, lint, build, docs (the documentation site,
#                 scripts/docs.sh), then the one-host Molecule scenarios but release_*
#   cluster lane: Molecule's cluster scenario on Debian 12, its installer scenario (the
#                 playbooks on the inventory of Arvados' own installer),
#                 integration:containers (site.yml's check mode on fresh containers), then
#                 `releases` (Slurm 24.11's scancel --ctld, the cluster scenario's light
#                 verify on Debian 11 and 13)
# (2026-12-05, 3b8e657: lab lane 2,408 s, tools 2,195 s, cluster 2,483 s, the whole `.ci/run`
# 2,509 s; 2026-12-06, 0eff5bc: lab 2,595 s, tools 2,504 s, cluster 2,704 s, `.ci/run`
# 2,730 s, over 45 minutes on a fresh machine: then the version stage's cores ran only the
# unit tests that run ansible-core, the light verify lost its idempotence step, and
# test_roles_check_mode.py and release_* changed lanes. 76021f7, release_* in the cluster
# lane again, on a quiet machine: integration:lab 2,055 s, integration-cores 183 s, then
# examples; the cluster lane 1,796 s before releases (cluster 1,021, installer 515,
# integration:containers 260), about 2,500 s before release_*'s 178: they stay in the lab
# lane.)
# The lab lane's output goes to the terminal, the others' to .build/test-logs/<stage>.log;
# every stage's log is kept there, and the end of each failed stage's log is printed again
# after the summary.
#
# Named only: molecule-releases, the cluster scenario's full verify on the Debian releases
# of MOLECULE_RELEASES, one after the other; molecule-releases:trixie (or bullseye,trixie)
# for some of them.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

ALL_STAGES=(unit integration integration-cores examples docs sanity versions lint build molecule releases)
NAMED_STAGES=(molecule-releases)
# The releases besides bookworm (the `molecule` stage's) that the cluster scenario runs on;
# the roles' meta/main.yml claim them (tests/unit/meta/test_role_platforms.py).
MOLECULE_RELEASES=(bullseye trixie)
STAGES=("$@")
lanes=no
if [ ${#STAGES[@]} -eq 0 ]; then
  STAGES=("${ALL_STAGES[@]}")
  lanes=yes
fi
LOG_DIR=.build/test-logs

PY=.venv/bin/python
LABCTL=(env -u PYTHONPATH "$PY" lab/labctl.py)
started_lab=no

runs_stage() {
  local stage
  for stage in "${STAGES[@]}"; do
    [ "$stage" = "$1" ] && return 0
  done
  return 1
}

# The unit and sanity stages run on the project venv's ansible-core (2.19): when both are in
# this call, the version stage does not run them a second time.
versions_stage() {
  if runs_stage unit && runs_stage sanity; then
    echo "versions: ansible-core 2.19 is this run's unit and sanity stages"
    VERSIONS_CORES="2.16 2.17 2.18 2.20 2.21" scripts/versions.sh
  else
    scripts/versions.sh
  fi
}

needs_lab() {
  local stage
  for stage in "${STAGES[@]}"; do
    case "$stage" in integration | integration-cores | examples | molecule) return 0 ;; esac
  done
  return 1
}

start_lab() {
  if "${LABCTL[@]}" status >/dev/null 2>&1; then
    echo "== lab already up; it stays up after the tests"
    return 0
  fi
  echo "== starting the lab"
  started_lab=yes
  "${LABCTL[@]}" start
}

stop_lab() {
  if [ "$started_lab" = yes ]; then
    echo "== stopping the lab"
    "${LABCTL[@]}" stop || echo "!! the lab did not stop cleanly" >&2
  fi
}
trap stop_lab EXIT

# The database modules' own tests, run a second time with psycopg2 (installed by
# scripts/install-deps.sh, the oldest version that runs here: see its requirements file);
# the first pass runs them with psycopg 3, which the modules take where both are installed.
# pytest's header names the driver of each pass. All of them under psycopg2 took 940 s on a
# busy machine (load 8-14), too much for the stage; these 34 took 331 s there (about 3 min
# on a quiet one, by make test's busy/quiet ratio). It leaves out the SIGKILL loop and the
# reconcile tests that exercise Slurm or a standby rather than the driver
# (tests/integration/test_both_drivers.py compares both drivers statement by statement in the
# first pass).
PSYCOPG2_TESTS=(
  tests/integration/test_arvados_fail_jobs.py
  tests/integration/test_arvados_fail_jobs_command.py
  tests/integration/test_arvados_reconcile_info.py
  tests/integration/test_fail_jobs_audit_rows.py
)
PSYCOPG2_SELECTION="not sigkill_at_random_moments and (not test_arvados_reconcile_info
  or live_work_is_left_alone or row_modified_within_the_grace or lost_job_with_finished_at_set
  or prefix_comes_from_the_system_user or database_down_fails or nothing_is_written)"

# test_slurm_release_ctld.py runs Debian 13's Slurm 24.11 from the trixie cluster image:
# the releases stage runs it, once that image is built.
RELEASE_TESTS=tests/integration/test_slurm_release_ctld.py

# test_roles_check_mode.py runs site.yml in containers of the Molecule base image and uses
# nothing of the lab: make test runs it in the cluster lane (integration:containers, 137 s
# alone, 280 s in make test), the rest in the lab lane (integration:lab).
CONTAINER_TESTS=tests/integration/test_roles_check_mode.py

# integration_stage [all|lab|containers]: the integration tests, all of them by default.
integration_stage() {
  local part=${1:-all} result=0 ignored=(--ignore="$RELEASE_TESTS")
  case "$part" in
    all) ;;
    lab) ignored+=(--ignore="$CONTAINER_TESTS") ;;
    containers) .venv/bin/pytest --durations=5 "$CONTAINER_TESTS"; return ;;
    *) echo "unknown part of the integration stage '$part' (all, lab, containers)" >&2; return 2 ;;
  esac
  .venv/bin/pytest --durations=15 "${ignored[@]}" tests/integration || result=1
  echo "== integration: the database modules' tests again, under psycopg2"
  ARVADOS_RECOVERY_PG_DRIVER=psycopg2 .venv/bin/pytest --durations=5 -k "${PSYCOPG2_SELECTION//$'\n'/ }" \
    "${PSYCOPG2_TESTS[@]}" || result=1
  return "$result"
}

# The cluster scenario on each release named, one after the other; every one runs even
# when an earlier one failed. MOLECULE_CLUSTER_VERIFY (full, light) is passed on.
molecule_releases_stage() {
  local release result=0
  for release in "$@"; do
    echo "== the cluster scenario on $release (verify: ${MOLECULE_CLUSTER_VERIFY:-full})"
    MOLECULE_DEBIAN_RELEASE=$release scripts/molecule.sh cluster || result=1
  done
  return "$result"
}

# What make test runs on the Debian releases besides 12 (issue 23): scancel --ctld on
# Debian 13's Slurm 24.11, then the cluster scenario's light verify (converge, the two
# reboots and the recovery playbooks, twice; not idempotence, site.yml's changed settings
# nor cancel_slurm_jobs.yml, which the full verify on Debian 12 runs) on each release of
# MOLECULE_RELEASES.
releases_stage() {
  local result=0
  if scripts/build-molecule-image.sh cluster trixie; then
    .venv/bin/pytest "$RELEASE_TESTS" || result=1
  else
    result=1
  fi
  MOLECULE_CLUSTER_VERIFY=light molecule_releases_stage "${MOLECULE_RELEASES[@]}" || result=1
  return "$result"
}

# A stage, or `molecule:SCENARIO,SCENARIO` for some of Molecule's scenarios, or
# `molecule-releases:RELEASE,RELEASE` for the cluster scenario on some releases, or
# `integration:lab` and `integration:containers` for the two parts of the integration stage.
run_stage() {
  case "$1" in
    unit)        .venv/bin/pytest -q tests/unit ;;
    integration) integration_stage ;;
    integration:*) integration_stage "${1#integration:}" ;;
    integration-cores) scripts/integration-cores.sh ;;
    examples)    .venv/bin/pytest -rs tests/examples ;;
    sanity)      scripts/sanity.sh ;;
    versions)    versions_stage ;;
    lint)        scripts/lint.sh ;;
    build)       scripts/build-check.sh ;;
    docs)        scripts/docs.sh ;;
    molecule)    scripts/molecule.sh ;;
    molecule:*)  local scenarios; IFS=, read -ra scenarios <<<"${1#molecule:}"; scripts/molecule.sh "${scenarios[@]}" ;;
    releases)    releases_stage ;;
    molecule-releases) molecule_releases_stage "${MOLECULE_RELEASES[@]}" ;;
    molecule-releases:*) local releases; IFS=, read -ra releases <<<"${1#molecule-releases:}"; molecule_releases_stage "${releases[@]}" ;;
    *) echo "unknown stage '$1' (stages: ${ALL_STAGES[*]}; named only: ${NAMED_STAGES[*]})" >&2; return 2 ;;
  esac
}

# run_lane RESULTS QUIET STAGE...: each stage in turn, its output in $LOG_DIR/<stage>.log
# (and on the terminal unless QUIET=yes); one "stage result seconds" line per stage in RESULTS.
run_lane() {
  local results=$1 quiet=$2 stage begin result log
  shift 2
  for stage in "$@"; do
    log="$LOG_DIR/${stage//[:,]/-}.log"
    begin=$SECONDS
    if [[ "$stage" =~ ^(integration|examples|molecule) ]] && [ "$lab_ok" = no ]; then
      echo "!! the lab did not start: $stage not run" >"$log"
      result=FAILED
    elif [ "$quiet" = yes ]; then
      if run_stage "$stage" >"$log" 2>&1; then result=passed; else result=FAILED; fi
    else
      echo "== stage: $stage"
      if run_stage "$stage" 2>&1 | tee "$log"; then result=passed; else result=FAILED; fi
    fi
    echo "$stage $result $((SECONDS - begin))" >>"$results"
  done
}

# The one-host Molecule scenarios whose names match (release_*) or do not match (!release_*)
# the pattern, comma-separated: the lanes share them out.
one_host_scenarios() {
  local file name names=()
  for file in extensions/molecule/*/molecule.yml; do
    file=${file%/molecule.yml}
    name=${file##*/}
    case "$name" in cluster | installer) continue ;; esac
    # shellcheck disable=SC2053 # a glob on purpose
    if [[ "$1" == !* ]]; then [[ "$name" == ${1#!} ]] || names+=("$name")
    else [[ "$name" == $1 ]] && names+=("$name"); fi
  done
  local IFS=,
  echo "${names[*]}"
}

# The cluster lane: on a fresh machine the releases' images (debootstrap, minutes each)
# build while the cluster scenario runs on Debian 12; trixie's first, for the releases
# stage's first test. That stage builds an image still missing itself, its error in its log.
cluster_lane() {
  local results=$1 images release
  {
    for release in trixie "${MOLECULE_RELEASES[@]}"; do
      scripts/build-molecule-image.sh cluster "$release" || break
    done
  } >"$LOG_DIR/release-images.log" 2>&1 &
  images=$!
  run_lane "$results" yes molecule:cluster molecule:installer integration:containers
  wait "$images"
  run_lane "$results" yes releases
}

scripts/link-collection.sh >/dev/null
lab_ok=yes
if needs_lab && ! start_lab; then
  lab_ok=no
fi

rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
results=$LOG_DIR/results
if [ "$lanes" = yes ]; then
  # The base image serves two lanes (the one-host scenarios, test_roles_check_mode.py):
  # built once before them. The cluster lane builds its releases' images itself.
  if [ "$lab_ok" = yes ]; then
    scripts/build-molecule-image.sh base
  fi
  lab_scenarios=$(one_host_scenarios 'release_*') tools_scenarios=$(one_host_scenarios '!release_*')
  echo "== three lanes: integration:lab, integration-cores, examples and molecule:$lab_scenarios here;"
  echo "   alongside, unit, sanity, versions, lint, build, docs and molecule:$tools_scenarios;"
  echo "   molecule:cluster, molecule:installer, integration:containers and releases (logs in $LOG_DIR)"
  run_lane "$results.tools" yes unit sanity versions lint build docs "molecule:$tools_scenarios" &
  tools_lane=$!
  cluster_lane "$results.cluster" &
  cluster_lane=$!
  run_lane "$results.lab" no integration:lab integration-cores examples "molecule:$lab_scenarios"
  echo "== waiting for the other lanes"
  wait "$tools_lane" "$cluster_lane"
  cat "$results.lab" "$results.tools" "$results.cluster" >"$results"
else
  run_lane "$results" no "${STAGES[@]}"
fi

passed=0 failed=0 report=() failed_stages=()
while read -r stage result seconds; do
  report+=("$(printf '%-42s %-7s %4ss' "$stage" "$result" "$seconds")")
  if [ "$result" = passed ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); failed_stages+=("$stage")
  fi
done <"$results"

for stage in "${failed_stages[@]}"; do
  echo
  echo "== the end of the failed stage $stage ($LOG_DIR/${stage//[:,]/-}.log)"
  tail -n 80 "$LOG_DIR/${stage//[:,]/-}.log"
done

echo
echo "== summary"
printf '  %s\n' "${report[@]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
