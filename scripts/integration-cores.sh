#!/usr/bin/env bash
# The recovery playbooks on the lab with the oldest and the newest ansible-core that
# meta/runtime.yml claims (2.16 and 2.21; the integration stage runs them all on the
# project's 2.19): the integration tests marked `cores`, one per playbook
# (recover_after_reboot.yml, recover_after_node_reboot.yml, cancel_slurm_jobs.yml), each
# a --check and real runs against the lab's PostgreSQL and Slurm. pytest runs on the
# project's virtualenv; TEST_ANSIBLE_PLAYBOOK points it at each core's ansible-playbook,
# whose Python also runs the modules (the lab inventory says ansible_playbook_python).
# A core outside requires_ansible is refused (COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH=error)
# and a deprecation warning fails the test.
#
# The cores' virtualenvs are the version stage's (scripts/versions.sh --venv makes or
# finds them, one maker at a time). Where 2.21 has no Python 3.12+ on this machine (its
# virtualenv then lives in the Debian 13 rootfs, which cannot reach the lab's Slurm), it
# is named as missing: skipped, or a failure under CI=true.
#
#   scripts/integration-cores.sh        needs the lab up (make test starts it)
# INTEGRATION_CORES overrides the cores (default: "oldest newest").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

read -ra CORES <<<"${INTEGRATION_CORES:-oldest newest}"
failed=() skipped=() report=()
begin=$SECONDS

for core in "${CORES[@]}"; do
  started=$SECONDS
  venv=$(scripts/versions.sh --venv "$core")
  status=$?
  if [ "$status" = 3 ]; then
    echo "integration-cores: MISSING: ansible-core $core: no controller Python for it on this machine"
    if [ "${CI:-}" = true ]; then failed+=("$core: no controller Python"); else skipped+=("$core"); fi
    continue
  elif [ "$status" != 0 ]; then
    failed+=("$core: its virtualenv")
    continue
  fi
  version=$("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)')
  echo "integration-cores: ansible-core $version ($venv)"
  if TEST_ANSIBLE_PLAYBOOK="$PWD/$venv/bin/ansible-playbook" ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH=error \
    .venv/bin/pytest -q -p no:cacheprovider -m cores tests/integration; then
    report+=("ansible-core $version: passed in $((SECONDS - started))s")
  else
    report+=("ansible-core $version: FAILED in $((SECONDS - started))s")
    failed+=("$version")
  fi
done

printf 'integration-cores: %s\n' "${report[@]}"
echo "integration-cores: took $((SECONDS - begin))s"
((${#skipped[@]})) && printf 'integration-cores: SKIPPED (set CI=true to fail instead): %s\n' "${skipped[@]}"
if ((${#failed[@]})); then
  printf 'integration-cores: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
