#!/usr/bin/env bash
# Builds the collection artifact into .build/dist/ and proves it is usable:
# it holds none of the development-only paths and all the files ansible-builder
# reads, it installs, ansible-galaxy lists it, and ansible-doc finds every
# module that plugins/modules/ has.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

venv_bin="$repo_root/.venv/bin"
dist_dir="$repo_root/.build/dist"
collection=arvados_ops.recovery

work_dir="$(mktemp -d "${TMPDIR:-/tmp}/build-check.XXXXXX")"
trap 'rm -rf "$work_dir"' EXIT

version="$("$venv_bin/python" scripts/release_check.py --print-version)"
artifact="$dist_dir/arvados_ops-recovery-$version.tar.gz"

echo "build-check: building $collection $version into ${dist_dir#"$repo_root"/}/"
mkdir -p "$dist_dir"
"$venv_bin/ansible-galaxy" collection build --force --output-path "$dist_dir" . >/dev/null

echo "build-check: checking the artifact for development-only paths"
# Anchored at the top level: a module or role may legitimately have a 'lab' in
# its name deeper down, but none of these may be shipped at the root.
forbidden='^(\./)?(lab|scripts|bench|extensions/molecule|\.ci|\.venv|\.lab|\.build|\.ansible|\.git|tests/output|tests/unit|tests/integration)(/|$)|^(\./)?(Makefile|requirements-dev\.txt|pytest\.ini|ansible\.cfg|\.gitignore)$|^(\./)?tests/[^/]*\.py$|(^|/)(__pycache__|\.pytest_cache)(/|$)|\.pyc$|\.tar\.gz$'
members="$(tar -tzf "$artifact")"
if bad="$(grep -E "$forbidden" <<<"$members")"; then
    echo "build-check: the artifact contains paths that must not be shipped:" >&2
    echo "$bad" >&2
    exit 1
fi
# meta/execution-environment.yml, requirements.txt and bindep.txt are what
# ansible-builder reads from the installed collection for an execution environment.
# The event source and the rulebook are what ansible-rulebook finds in the installed collection.
for required in MANIFEST.json FILES.json LICENSE README.md meta/runtime.yml \
    meta/execution-environment.yml requirements.txt bindep.txt \
    extensions/eda/plugins/event_source/findings.py extensions/eda/rulebooks/heal.yml; do
    if ! grep -qE "^(\./)?${required//./\\.}\$" <<<"$members"; then
        echo "build-check: the artifact lacks $required" >&2
        exit 1
    fi
done

# Only the temporary directory may be searched, or the working-tree symlink
# that the repository's ansible.cfg points at would answer for the artifact.
install_dir="$work_dir/collections"
touch "$work_dir/ansible.cfg"
export ANSIBLE_CONFIG="$work_dir/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH="$install_dir"

echo "build-check: installing into a temporary collections directory"
"$venv_bin/ansible-galaxy" collection install --offline -p "$install_dir" "$artifact" >/dev/null

echo "build-check: ansible-galaxy collection list"
listed="$("$venv_bin/ansible-galaxy" collection list "$collection" -p "$install_dir" 2>&1)" || {
    echo "$listed" >&2
    exit 1
}
if ! awk -v name="$collection" -v version="$version" '$1 == name && $2 == version { found = 1 } END { exit !found }' <<<"$listed"; then
    echo "build-check: $collection $version not listed:" >&2
    echo "$listed" >&2
    exit 1
fi

echo "build-check: comparing ansible-doc's module list with plugins/modules/"
expected="$(find plugins/modules -maxdepth 1 -type f -name '*.py' ! -name '__init__.py' -printf '%f\n' 2>/dev/null \
    | sed "s/\\.py\$//; s/^/$collection./" | LC_ALL=C sort)"
documented="$("$venv_bin/ansible-doc" -t module -l "$collection" -j \
    | "$venv_bin/python" -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin))))' | LC_ALL=C sort)"
if [[ "$expected" != "$documented" ]]; then
    echo "build-check: ansible-doc and plugins/modules/ disagree (< files, > ansible-doc):" >&2
    diff <(printf '%s\n' "$expected") <(printf '%s\n' "$documented") >&2 || true
    exit 1
fi
module_count="$(grep -c . <<<"$expected" || true)"

# -l lists a module even when its DOCUMENTATION is missing or broken; loading
# each one's documentation is what fails then.
if ((module_count)); then
    echo "build-check: loading the documentation of each module"
    mapfile -t modules <<<"$expected"
    if ! "$venv_bin/ansible-doc" -t module -j "${modules[@]}" >/dev/null; then
        echo "build-check: ansible-doc cannot load the documentation above" >&2
        exit 1
    fi
fi

echo "build-check: ok: $artifact installs, $module_count module(s) documented"
