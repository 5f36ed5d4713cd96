#!/usr/bin/env bash
# The version stage: what meta/runtime.yml and tests/config.yml claim, tested.
#
# - ansible-core 2.16 to 2.21: the unit tests that run ansible-core's code (marked `cores`
#   by tests/unit/conftest.py: the modules, filters, roles and playbooks; the rest import no
#   Ansible and would run the same code again) and ansible-test sanity, each core in a
#   virtualenv of its own under .build/versions/ (2.19 is the project's .venv, pinned in
#   requirements-dev.txt; another ansible-core never goes into .venv).
# - ansible-core 2.20 and 2.21 need a controller Python >= 3.12, which Debian 12 does not
#   ship: their virtualenvs are made from Python 3.13 (else 3.12), found like the target
#   Pythons below (pyenv on this kind of machine). Where there is none, from the Python 3.13
#   of a Debian 13 rootfs (scripts/controller-rootfs.sh: debootstrap once, 1 to 4 minutes),
#   in which those cores' virtualenvs, unit tests, sanity and ansible-playbook runs then
#   run. Each core says which ran (pyenv, PATH or rootfs). VERSIONS_CONTROLLER=rootfs takes
#   the rootfs even where pyenv has a Python, to test the fallback.
# - On the newest core (2.21), real ansible-playbook runs that need no lab, with
#   COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH=error (scripts/controller-smoke.sh).
# - The oldest and the newest Python the project's ansible-core supports on managed hosts
#   (3.8 and 3.13 for 2.19): the unit tests of plugins/ (modules and module_utils), and
#   ansible-test's compile and import tests of the modules.
#
# Interpreters are looked up on PATH, then under pyenv ($PYENV_ROOT/versions). A missing one is
# named; under CI=true that fails the stage, elsewhere it is skipped.
#
# VERSIONS_CORES limits the cores run (default: all six). scripts/run-tests.sh leaves 2.19
# out when its unit and sanity stages run in the same call: they are the 2.19 run.
# VERSIONS_TARGET_PYTHONS=no leaves out the managed-host Pythons (3.8 and 3.13).
#
#   scripts/versions.sh --venv oldest|newest|SERIES
# only makes (or finds) that core's virtualenv on this machine and prints its directory;
# scripts/integration-cores.sh runs the recovery playbooks on the lab with it. A lock per
# virtualenv lets both run at once (two lanes of make test).
#
# ansible-test's virtualenvs live under ~/.ansible/test: two sanity runs at once collide
# there, so every run here is sequential (give a parallel make test its own HOME).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# One pinned release per series; raise them with requirements-dev.txt.
declare -A CORE_PINS=([2.16]=2.16.19 [2.17]=2.17.14 [2.18]=2.18.19 [2.20]=2.20.10 [2.21]=2.21.5)
# The cores whose controller needs a newer Python than the project's (3.11, Debian 12's).
declare -A CORE_CONTROLLER_PYTHONS=([2.20]="3.13 3.12" [2.21]="3.13 3.12")
# The oldest and the newest core: the newest's ansible-playbook also runs the collection's
# playbooks here, and both run the recovery playbooks on the lab (integration-cores).
OLDEST_CORE=2.16
NEWEST_CORE=2.21
read -ra CORES <<<"${VERSIONS_CORES:-2.16 2.17 2.18 2.19 2.20 2.21}"
# pytest 8.4, PyYAML 6.0.4 and prometheus-client 0.22 no longer install on Python 3.8.
PY38_TOOLS=(pytest==8.3.5 PyYAML==6.0.3 prometheus-client==0.21.1)
pin() { grep -i "^$1==" requirements-dev.txt; }
# ruamel.yaml: the dispatcher_config filter (a controller plugin) edits config.yml with it.
# prometheus-client: the watch's tests read its metrics back with Prometheus' parser.
# psycopg: the lab inventory runs the database modules on the controller's Python
# (integration-cores).
TOOLS=("$(pin pytest)" "$(pin PyYAML)" "$(pin ruamel.yaml)" "$(pin prometheus-client)" "$(pin psycopg)" "$(pin psycopg-binary)")

VERSIONS_DIR=.build/versions
PROJECT_PY=.venv/bin/python
ROOTFS=scripts/controller-rootfs.sh
failed=() skipped=() controllers=()
# The command prefix that runs a core's Python: empty here, the rootfs's runner there.
RUN=()
rootfs_state=unbuilt

say() { echo "versions: $*"; }

step() {
  local name=$1 began=$SECONDS
  shift
  say "$name"
  if "$@"; then
    say "$name: passed in $((SECONDS - began))s"
  else
    say "$name: FAILED in $((SECONDS - began))s"
    failed+=("$name")
  fi
}

missing() {
  say "MISSING: $1"
  if [ "${CI:-}" = true ]; then
    failed+=("$1")
  else
    skipped+=("$1")
  fi
}

# venv DIR PYTHON REQUIREMENT...: a virtualenv holding exactly those pins, remade when they
# change; made with $RUN (in the rootfs, or here). One maker at a time per virtualenv.
venv() {
  local dir=$1
  mkdir -p "$(dirname "$dir")"
  { flock 9 && venv_unlocked "$@"; } 9>"$dir.lock"
}

venv_unlocked() {
  local dir=$1 python=$2 want
  shift 2
  want="$("${RUN[@]}" "$python" -c 'import sys; print(sys.version)') $*"
  if [ -f "$dir/pyvenv.cfg" ] && [ "$(cat "$dir/.pins" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  say "installing $* into $dir"
  rm -rf "$dir"
  "${RUN[@]}" "$python" -m venv "$dir" &&
    "${RUN[@]}" "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" &&
    echo "$want" >"$dir/.pins"
}

# The interpreter of Python X.Y (its real path): pythonX.Y on PATH if it runs (a pyenv shim
# may not), else the newest pyenv build of X.Y.
find_python() {
  local candidate pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
  for candidate in "$(command -v "python$1" 2>/dev/null)" \
    "$(find "$pyenv_root/versions" -maxdepth 3 -path "*/$1.*/bin/python$1" 2>/dev/null | sort -V | tail -n 1)"; do
    [ -n "$candidate" ] && "$candidate" -c 'import sys; print(sys.executable)' 2>/dev/null && return 0
  done
  return 1
}

# The managed-host Pythons the project's ansible-core supports, oldest and newest.
target_pythons() {
  "$PROJECT_PY" - <<'PY'
from ansible_test._util.target.common import constants

versions = constants.REMOTE_ONLY_PYTHON_VERSIONS + constants.CONTROLLER_PYTHON_VERSIONS
ordered = sorted(versions, key=lambda version: tuple(int(part) for part in version.split('.')))
print(ordered[0], ordered[-1])
PY
}

# The Python a core's controller runs on: the project's, or the first of the core's
# CORE_CONTROLLER_PYTHONS found (none under VERSIONS_CONTROLLER=rootfs).
controller_python() {
  local version
  if [ -z "${CORE_CONTROLLER_PYTHONS[$1]:-}" ]; then
    "$PROJECT_PY" -c 'import sys; print(sys._base_executable)'
    return
  fi
  [ "${VERSIONS_CONTROLLER:-}" = rootfs ] && return 1
  for version in ${CORE_CONTROLLER_PYTHONS[$1]}; do
    find_python "$version" && return 0
  done
  return 1
}

# Where a Python found by find_python comes from, for the report.
python_origin() {
  case "$1" in
    "${PYENV_ROOT:-$HOME/.pyenv}"/*) echo pyenv ;;
    *) echo PATH ;;
  esac
}

# The Debian 13 rootfs, built at most once per run (a failed build is not retried).
rootfs_ready() {
  if [ "$rootfs_state" = unbuilt ]; then
    rootfs_state=failed
    step "Debian 13 rootfs for the controllers of 2.20 and later" "$ROOTFS" build && rootfs_state=ready
  fi
  [ "$rootfs_state" = ready ]
}

# core_venv SERIES: the core's virtualenv (on this machine, never the rootfs) made or
# found; prints its directory.
core_venv() {
  local series=$1 dir python
  case "$series" in oldest) series=$OLDEST_CORE ;; newest) series=$NEWEST_CORE ;; esac
  if [ "$series" = 2.19 ]; then
    echo .venv
    return 0
  fi
  if [ -z "${CORE_PINS[$series]:-}" ]; then
    say "unknown ansible-core series '$series' (known: ${!CORE_PINS[*]} 2.19)" >&2
    return 2
  fi
  if ! python=$(controller_python "$series"); then
    say "ansible-core $series: no controller Python ${CORE_CONTROLLER_PYTHONS[$series]// / or } on this machine" >&2
    return 3
  fi
  dir=$VERSIONS_DIR/core-$series
  venv "$dir" "$python" "ansible-core==${CORE_PINS[$series]}" "${TOOLS[@]}" >&2 || return 1
  echo "$dir"
}

run_core() {
  local series=$1 dir python version controller sanity_env=() copy=sanity-$1
  RUN=()
  if [ "$series" = 2.19 ]; then
    dir=.venv
  elif [ -n "${CORE_PINS[$series]:-}" ]; then
    dir=$VERSIONS_DIR/core-$series
    if python=$(controller_python "$series"); then
      controller="$("$python" -V 2>&1) from $(python_origin "$python") ($python)"
    elif [ -n "${CORE_CONTROLLER_PYTHONS[$series]:-}" ] && rootfs_ready; then
      # What the rootfs makes only runs in there: its virtualenvs and ansible-test's (under
      # the sanity copy) have directories of their own.
      RUN=("$ROOTFS" run) python=python3 dir=$VERSIONS_DIR/core-$series-rootfs copy=sanity-$series-rootfs
      controller="$("${RUN[@]}" python3 -V 2>&1) from the Debian 13 rootfs"
    else
      missing "ansible-core $series: a controller Python ${CORE_CONTROLLER_PYTHONS[$series]// / or } (looked on PATH and in ${PYENV_ROOT:-$HOME/.pyenv}/versions, and the Debian 13 rootfs could not be built)"
      return
    fi
    say "ansible-core $series: controller $controller"
    [ -n "${CORE_CONTROLLER_PYTHONS[$series]:-}" ] && controllers+=("ansible-core $series on $controller")
    venv "$dir" "$python" "ansible-core==${CORE_PINS[$series]}" "${TOOLS[@]}" ||
      { failed+=("ansible-core $series: install"); return; }
    if [ -n "${CORE_CONTROLLER_PYTHONS[$series]:-}" ]; then
      # ansible-test sanity runs on a controller Python this core supports, found as
      # pythonX.Y on PATH (the rootfs's is there already).
      version=$("${RUN[@]}" "$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
      sanity_env=(SANITY_PYTHON="$version")
      if ((${#RUN[@]} == 0)); then
        mkdir -p "$VERSIONS_DIR/bin"
        ln -sfn "$python" "$VERSIONS_DIR/bin/python$version"
        sanity_env+=(PATH="$PWD/$VERSIONS_DIR/bin:$PATH")
      fi
    fi
  else
    say "unknown ansible-core series '$series' (known: ${!CORE_PINS[*]} 2.19)"
    failed+=("ansible-core $series")
    return
  fi
  step "ansible-core $series: unit tests marked cores" "${RUN[@]}" "$dir/bin/python" -m pytest -q -p no:cacheprovider \
    -m cores tests/unit
  step "ansible-core $series: sanity" "${RUN[@]}" env "${sanity_env[@]}" SANITY_VENV="$dir" \
    SANITY_COPY_ROOT="$VERSIONS_DIR/$copy" scripts/sanity.sh
  if [ "$series" = "$NEWEST_CORE" ]; then
    step "ansible-core $series: ansible-playbook runs" "${RUN[@]}" scripts/controller-smoke.sh "$dir"
  fi
  RUN=()
}

# The unit tests of the code that runs on managed hosts (modules, module_utils) run against
# the project's ansible (its module_utils support 3.8), put on the path as ansible-test units
# does, without installing ansible-core there. Filter plugins run on the controller (Python
# 3.11+ for 2.19), so the core runs above test them: importing their ansible.errors here
# loads controller code, after which 2.19 serializes module arguments as a controller does
# and asks for jinja2, which a managed host does not have.
run_python() {
  local version=$1 python=$2 tools
  local dir=$VERSIONS_DIR/python-$version
  if [ "$version" = 3.8 ]; then tools=("${PY38_TOOLS[@]}"); else tools=("${TOOLS[@]}"); fi
  venv "$dir" "$python" "${tools[@]}" || { failed+=("Python $version: install"); return; }
  mkdir -p "$VERSIONS_DIR/ansible-lib" "$VERSIONS_DIR/bin"
  ln -sfn "$("$PROJECT_PY" -c 'import ansible, os; print(os.path.dirname(ansible.__file__))')" \
    "$VERSIONS_DIR/ansible-lib/ansible"
  # ansible-test finds target interpreters as pythonX.Y on PATH.
  ln -sfn "$python" "$VERSIONS_DIR/bin/python$version"
  step "Python $version: unit tests of plugins/modules and plugins/module_utils" \
    env PYTHONPATH="$VERSIONS_DIR/ansible-lib" \
    "$dir/bin/python" -m pytest -q -p no:cacheprovider tests/unit/plugins/modules tests/unit/plugins/module_utils
  step "Python $version: compile and import" env PATH="$PWD/$VERSIONS_DIR/bin:$PATH" SANITY_PYTHON="$version" \
    scripts/sanity.sh --test compile --test import
}

if [ "${1:-}" = --venv ]; then
  core_venv "${2:?usage: $0 --venv oldest|newest|SERIES}"
  exit
fi

begin=$SECONDS
scripts/link-collection.sh >/dev/null
for series in "${CORES[@]}"; do
  run_core "$series"
done
read -r oldest newest < <(target_pythons)
[ "${VERSIONS_TARGET_PYTHONS:-}" = no ] && oldest='' newest=''
for version in $oldest $newest; do
  if python=$(find_python "$version"); then
    run_python "$version" "$python"
  else
    missing "Python $version (looked for python$version on PATH and in ${PYENV_ROOT:-$HOME/.pyenv}/versions)"
  fi
done

say "took $((SECONDS - begin))s"
((${#controllers[@]})) && printf 'versions: controller: %s\n' "${controllers[@]}"
((${#skipped[@]})) && printf 'versions: SKIPPED (set CI=true to fail instead): %s\n' "${skipped[@]}"
if ((${#failed[@]})); then
  printf 'versions: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
if ((${#skipped[@]})); then say "passed, ${#skipped[@]} skipped"; else say "all passed"; fi
