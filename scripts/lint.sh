#!/usr/bin/env bash
# Lints the collection: ruff on the Python of plugins/, lab/, bench/ and tests/, mypy on plugins/,
# ansible-lint (production profile), yamllint on every YAML file of the repository,
# the shell scripts (shellcheck), and antsibull-changelog on changelogs/.
# Every check runs even when an earlier one fails; the exit status says whether any failed.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

venv_bin="$repo_root/.venv/bin"
# ansible-lint runs ansible-playbook --syntax-check and ansible-galaxy by name.
export PATH="$venv_bin:$PATH"
# ansible-lint installs the collection into its cache, .ansible/collections,
# and then warns that ansible.cfg's .build/collections holds "another version"
# (the working-tree symlink). Harmless. Setting ANSIBLE_COLLECTIONS_PATH to
# silence it would switch ansible-lint to installing into ~/.ansible instead.

failed=()

run() {
    local name=$1
    shift
    echo "lint: $name"
    if ! "$@"; then
        failed+=("$name")
    fi
}

# Settings in ruff.toml; every Python file of the project, the roles' helpers and the
# Molecule scenarios' included.
python_dirs=(plugins lab bench tests extensions roles scripts)
run "ruff check" "$venv_bin/ruff" check --no-cache "${python_dirs[@]}"
run "ruff format --check" "$venv_bin/ruff" format --check --no-cache "${python_dirs[@]}"
# Settings in mypy.ini: the collection as Ansible imports it, through the development link.
run "link-collection" scripts/link-collection.sh
run "mypy" "$venv_bin/mypy"
run "ansible-lint --profile production" \
    "$venv_bin/ansible-lint" --profile production --nocolor
run "yamllint" "$venv_bin/yamllint" --strict .
run "shellcheck" shellcheck scripts/*.sh .ci/run
run "antsibull-changelog lint" "$venv_bin/antsibull-changelog" lint
run "antsibull-changelog lint-changelog-yaml" \
    "$venv_bin/antsibull-changelog" lint-changelog-yaml changelogs/changelog.yaml

if ((${#failed[@]})); then
    printf 'lint: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "lint: all passed"
