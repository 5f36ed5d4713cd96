#!/usr/bin/env bash
# Runs `molecule test` for every scenario under extensions/molecule/ (or those named:
# scripts/molecule.sh default refuse_bad_settings), each one alone, and reports each.
# Exit status 0 only when every scenario passed.
#
# It installs nothing: it checks what the scenarios need and says what is missing.
# It builds the images once (scripts/build-molecule-image.sh: base, and cluster for
# the `cluster` and `installer` scenarios) and reuses them.
# The lab must be up (lab/labctl.py start) for the one-host scenarios: they use its
# PostgreSQL. A scenario interrupted (INT, TERM) is destroyed before the script exits.
#
# MOLECULE_DEBIAN_RELEASE (bullseye, bookworm, trixie; default bookworm) is the Debian
# release of the `cluster` scenario's hosts: its own image, containers and network, on a
# subnet of its own (MOLECULE_CLUSTER_SUBNET), so that it never meets another release's
# run. The one-host scenarios and `installer` run on bookworm whatever it says.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root" || exit 1

venv_bin=$repo_root/.venv/bin
# podman's settings for this kind of machine (runc, cgroupfs, lower ulimits).
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo_root/extensions/molecule/containers.conf}
# The working tree as arvados_ops.recovery (scripts/link-collection.sh), then
# containers.podman for Molecule's podman driver: scripts/install-deps.sh puts it in
# .build/molecule-collections, a pip-installed `ansible` package in the venv also works.
export ANSIBLE_COLLECTIONS_PATH=$repo_root/.build/collections:$repo_root/.build/molecule-collections
export PATH=$venv_bin:$PATH
export ANSIBLE_FORCE_COLOR=false PY_COLORS=0 ANSIBLE_NOCOLOR=1 NO_COLOR=1
# Molecule's inventory names the connection `podman`: this directory's plugin answers to
# that name first, containers.podman.podman with pipelining (one podman exec per module
# task where there were four; extensions/molecule/README.md).
export ANSIBLE_CONNECTION_PLUGINS=$repo_root/extensions/molecule/connection_plugins

missing=()
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || missing+=("$tool (Debian package $tool)")
done
[ -x "$venv_bin/molecule" ] || missing+=("$venv_bin/molecule (requirements-dev.txt: molecule, molecule-plugins[podman])")
if [ -x "$venv_bin/ansible-galaxy" ] &&
    ! "$venv_bin/ansible-galaxy" collection list containers.podman 2>/dev/null | grep -q '^containers\.podman '; then
  missing+=("the Ansible collection containers.podman (in .build/molecule-collections, from scripts/install-deps.sh)")
fi
if ((${#missing[@]})); then
  printf 'molecule: missing: %s\n' "${missing[@]}" >&2
  echo "molecule: run scripts/install-deps.sh (as root) first" >&2
  exit 1
fi
release=${MOLECULE_DEBIAN_RELEASE:-bookworm}
case "$release" in
  bullseye) subnet=10.89.61 ;;
  bookworm) subnet=10.89.67 ;;
  trixie) subnet=10.89.63 ;;
  *) echo "molecule: unknown MOLECULE_DEBIAN_RELEASE '$release' (bullseye, bookworm, trixie)" >&2; exit 2 ;;
esac
export MOLECULE_DEBIAN_RELEASE=$release MOLECULE_CLUSTER_SUBNET=${MOLECULE_CLUSTER_SUBNET:-$subnet}

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  for file in extensions/molecule/*/molecule.yml; do
    scenarios+=("$(basename "$(dirname "$file")")")
  done
fi

# The one-host scenarios use the lab's PostgreSQL and nothing else of it; `cluster` and
# `installer` have their own, on their api host. Only PostgreSQL is asked: make test runs them beside the
# integration tests, which drain and take down the lab's Slurm node on purpose.
for scenario in "${scenarios[@]}"; do
  case "$scenario" in cluster | installer) continue ;; esac
  if ! env -u PYTHONPATH "$venv_bin/python" lab/labctl.py status postgresql >/dev/null 2>&1; then
    echo "molecule: the lab is not up (scenario $scenario uses it); start it with '$venv_bin/python lab/labctl.py start'" >&2
    exit 1
  fi
  break
done

scripts/link-collection.sh >/dev/null || exit 1

# Each image is built once and reused: the base image (bookworm) for the one-host
# scenarios, the cluster image of the release for `cluster`.
images=()
for scenario in "${scenarios[@]}"; do
  if [ "$scenario" = cluster ]; then
    images+=("cluster $release")
  elif [ "$scenario" = installer ]; then
    # The cluster image's packages, on Debian 12 whatever MOLECULE_DEBIAN_RELEASE says.
    images+=("cluster bookworm")
  else
    images+=("base bookworm")
  fi
done
while read -r kind image_release; do
  [ -n "$kind" ] || continue
  begin=$SECONDS
  scripts/build-molecule-image.sh "$kind" "$image_release" || exit 1
  echo "molecule: $kind image of $image_release ready ($((SECONDS - begin)) s)"
done < <(printf '%s\n' "${images[@]}" | sort -u)

stamp() {
  local line
  while IFS= read -r line; do
    printf '%(%H:%M:%S)T %s\n' -1 "$line"
  done
}

# Molecule destroys a scenario's hosts after a failed step, but not when it is itself
# killed (an interrupt, a CI timeout): then the scenario under way is destroyed here.
# Molecule runs in a session of its own, so that the signal reaches its ansible-playbook
# children too (they would go on against the hosts being destroyed).
current=""
ephemeral=()
group_file=$(mktemp)
destroy_on_signal() {
  trap - INT TERM
  if [ -n "$current" ]; then
    echo "molecule: interrupted during $current; destroying its hosts" >&2
    kill -TERM -- "-$(cat "$group_file")" 2>/dev/null
    wait
    env "${ephemeral[@]}" "$venv_bin/molecule" destroy -s "$current" >/dev/null 2>&1 ||
      echo "molecule: destroy -s $current failed; see 'podman ps -a'" >&2
  fi
  rm -f "$group_file"
  exit 130
}
trap destroy_on_signal INT TERM

# The cluster scenario's light verify (MOLECULE_CLUSTER_VERIFY=light: make test's releases
# stage, Debian 11 and 13) also leaves out Molecule's idempotence step, site.yml a second
# time on four hosts (124-156 s a release in make test, on its longest lane); the full
# verify keeps it (Debian 12 in make test, every release in make molecule-releases).
# Molecule takes no list of steps on its command line: this is `molecule test`'s sequence
# without that step (converge creates and prepares first), the hosts destroyed at the end
# whatever happened.
# shellcheck disable=SC2016 # expanded by the bash that runs it, with its own $1 and $2
LIGHT_SEQUENCE='molecule=$1 scenario=$2
"$molecule" destroy -s "$scenario" && "$molecule" syntax -s "$scenario" &&
  "$molecule" converge -s "$scenario" && "$molecule" verify -s "$scenario"
result=$?
"$molecule" destroy -s "$scenario" || result=1
exit "$result"'

passed=0 failed=0 report=()
for scenario in "${scenarios[@]}"; do
  label=$scenario
  [ "$scenario" = cluster ] && label="$scenario ($release)"
  echo "== molecule test -s $label"
  begin=$SECONDS
  current=$scenario
  # Each line stamped with the time, so a log shows what each step took. In the
  # background, so that a signal reaches the trap at once rather than after Molecule.
  # setsid keeps the PID (the subshell leads no group), which is so the new group's id.
  # Each release's cluster keeps its files (inventory, munge key, password) apart too.
  ephemeral=()
  [ "$scenario" = cluster ] && ephemeral=(MOLECULE_EPHEMERAL_DIRECTORY="$repo_root/.build/molecule/cluster-$release")
  [ "$scenario" = installer ] && ephemeral=(MOLECULE_EPHEMERAL_DIRECTORY="$repo_root/.build/molecule/installer")
  command=("$venv_bin/molecule" test -s "$scenario")
  if [ "$scenario" = cluster ] && [ "${MOLECULE_CLUSTER_VERIFY:-full}" = light ]; then
    command=(bash -c "$LIGHT_SEQUENCE" light-sequence "$venv_bin/molecule" "$scenario")
  fi
  (echo "$BASHPID" >"$group_file"; exec env "${ephemeral[@]}" setsid "${command[@]}") 2>&1 | stamp &
  if wait $!; then
    result=passed; passed=$((passed + 1))
  else
    result=FAILED; failed=$((failed + 1))
  fi
  report+=("$(printf '%-22s %-7s %4ss' "$label" "$result" $((SECONDS - begin)))")
done

rm -f "$group_file"
echo
echo "== molecule summary"
printf '  %s\n' "${report[@]}"
echo "molecule: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
