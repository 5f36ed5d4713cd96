#!/usr/bin/env bash
# Real ansible-doc and ansible-playbook runs of the collection with one ansible-core, none
# needing the lab: the version stage (scripts/versions.sh) runs it on the newest core.
#   scripts/controller-smoke.sh VENV    (e.g. .build/versions/core-2.21)
# - ansible-doc of every module, role and filter;
# - --syntax-check of every playbook under playbooks/;
# - tests/controller/filters_on_localhost.yml in check mode (the filter plugins).
# (The role tests of tests/unit/roles, run by the version stage with each core's own
# ansible-playbook, run the roles on localhost.)
# A core outside meta/runtime.yml's requires_ansible is an error, as is any warning:
# a deprecation shows there on the release that announces it.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1

venv_bin="$(realpath "${1:?usage: $0 VENV}")/bin"
scripts/link-collection.sh >/dev/null
export ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH=error ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=false
output=$(mktemp) inventory=$(mktemp)
trap 'rm -f "$output" "$inventory"' EXIT
# Every group a playbook names, the optional ones too (playbooks/inventory/example.yml
# leaves those out, and an unmatched host pattern is a warning), and the groups the
# playbooks' first play makes in memory (playbooks/tasks/hosts.yml), which a run has by
# the time a later play asks for them but --syntax-check, running no play, never does.
printf '[%s]\n%s.example.org\n' arvados_api api slurm_controllers slurm-ctl \
  arvados_dispatchers dispatcher crunch_v1_dispatcher crunch-dispatch \
  recover__api api recover__slurm slurm-ctl recover__dispatchers dispatcher \
  recover__crunch_v1 crunch-dispatch recover__db api >"$inventory"

# run COMMAND...: fails on a failure or on any warning in its output.
run() {
  if ! "$@" >"$output" 2>&1; then
    echo "controller-smoke: FAILED: $*" >&2
    cat "$output" >&2
    return 1
  fi
  # ansible-doc -t role of 2.20 and 2.21 warns that ansible-core's own internal collection
  # (ansible._protomatter) has no version: about ansible-core, not this collection.
  if grep -E '\[(DEPRECATION )?WARNING\]' "$output" | grep -v "/ansible/_internal/ansible_collections/ansible/_protomatter' does not have a MANIFEST.json" >&2; then
    echo "controller-smoke: warnings from: $*" >&2
    return 1
  fi
}

echo "controller-smoke: ansible-core $("$venv_bin/python" -c 'from ansible.release import __version__; print(__version__)')"
modules=(plugins/modules/*.py) roles=(roles/*/) playbooks=(playbooks/*.yml)
for module in "${modules[@]}"; do
  run "$venv_bin/ansible-doc" "arvados_ops.recovery.$(basename "$module" .py)"
done
for role in "${roles[@]}"; do
  run "$venv_bin/ansible-doc" -t role "arvados_ops.recovery.$(basename "$role")"
done
filters=(plugins/filter/*.yml)
filter_names=()
for filter in "${filters[@]}"; do
  filter_names+=("arvados_ops.recovery.$(basename "$filter" .yml)")
done
run "$venv_bin/ansible-doc" -t filter "${filter_names[@]}"
echo "controller-smoke: ansible-doc of ${#modules[@]} modules, ${#roles[@]} roles and ${#filters[@]} filters"
for playbook in "${playbooks[@]}"; do
  run "$venv_bin/ansible-playbook" -i "$inventory" --syntax-check "$playbook"
done
echo "controller-smoke: syntax of ${#playbooks[@]} playbooks"
run "$venv_bin/ansible-playbook" -i localhost, -c local -e "ansible_python_interpreter=$venv_bin/python" \
  --check tests/controller/filters_on_localhost.yml
echo "controller-smoke: tests/controller/filters_on_localhost.yml passed in check mode"
