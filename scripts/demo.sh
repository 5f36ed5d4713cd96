#!/usr/bin/env bash
# make demo: the whole recovery on the local lab, as an operator would run it.
#   1. start the lab (PostgreSQL + single-node Slurm; nothing happens if it is up);
#   2. seed a cluster that "just rebooted": jobs left Running from before this host's
#      boot, with valid API tokens and Slurm jobs, and one job started since (exempt);
#      this replaces the previous demo's data and cancels its Slurm jobs;
#   3. show it; 4. run playbooks/recover_after_reboot.yml with the lab inventory;
#   5. show it again, and before/after side by side;
#   6. run the playbook a second time: it changes nothing.
# The lab stays up. Rerunnable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

python=.venv/bin/python
labctl=(.venv/bin/python lab/labctl.py)
# ansible-core refuses a non-UTF-8 locale.
export LC_ALL=C.UTF-8
export PATH="$repo_root/.venv/bin:$PATH"
playbook=(ansible-playbook -i playbooks/inventory/lab.yml playbooks/recover_after_reboot.yml)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

bold='' plain=''
if [[ -t 1 ]]; then
    bold=$'\033[1m' plain=$'\033[0m'
fi
step() {
    printf '\n%s== %s%s\n' "$bold" "$*" "$plain"
}

scripts/link-collection.sh >/dev/null

step "1. The lab: PostgreSQL and a single-node Slurm"
"${labctl[@]}" start
eval "$("${labctl[@]}" env)"

step "2. Seed a cluster whose API server just rebooted (replaces the previous demo's data)"
"$python" -m lab.demo seed-rebooted

step "3. Before the recovery"
"$python" -m lab.demo show
"$python" -m lab.demo counts --save "$work/before.json" >/dev/null

step "4. Recover: ${playbook[*]}"
start=$SECONDS
"${playbook[@]}"
echo "(took $((SECONDS - start)) s)"

step "5. After the recovery"
"$python" -m lab.demo show
echo
"$python" -m lab.demo counts --before "$work/before.json"

step "6. Run it again: nothing is left to do"
"${playbook[@]}" | tee "$work/second-run.log"
if ! grep -Eq '^localhost +: ok=[0-9]+ +changed=0 +unreachable=0 +failed=0' "$work/second-run.log"; then
    echo "demo: the second run changed something (see above)" >&2
    exit 1
fi
echo "Second run: changed=0."

cat <<EOF

The lab stays up.
  Use it by hand:  eval "\$(${labctl[*]} env)"; $python -m lab.demo show
  Preview a run:   ${playbook[*]} --check
  Stop it:         make lab-stop   (or ${labctl[*]} stop)
EOF
