#!/usr/bin/env bash
# ansible-test sanity on the collection, offline-capable.
#
# ansible-test insists on running from .../ansible_collections/<ns>/<name> and,
# in a git checkout, lists the files to test with git. The repository root is
# neither (and holds the lab, the venv and other things sanity must not see), so
# we test a git-initialised copy under .build/sanity that holds what the
# artifact ships plus all of tests/. The copy and ansible-test's own virtualenvs
# (under the copy's tests/output and ~/.ansible/test) are kept between runs.
#
# Extra arguments are passed to ansible-test, e.g. --test pylint, -v.
# The version stage (scripts/versions.sh) runs it with another ansible-core and Python:
#   SANITY_VENV       the virtualenv whose ansible-test runs (default: .venv)
#   SANITY_COPY_ROOT  where the copy lives (default: .build/sanity), one per ansible-core
#   SANITY_PYTHON     the Python version tested (default: 3.11, Debian 12's)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

venv_bin="$(realpath -m "${SANITY_VENV:-.venv}")/bin"
copy_dir="$(realpath -m "${SANITY_COPY_ROOT:-.build/sanity}")/ansible_collections/arvados_ops/recovery"
python_version="${SANITY_PYTHON:-3.11}"

if [[ ! -x "$venv_bin/ansible-test" ]]; then
    echo "sanity: $venv_bin/ansible-test is missing; install requirements-dev.txt into .venv first (make deps)" >&2
    exit 1
fi

# ansible-test bootstraps pip in each of its virtualenvs with a get-pip script
# downloaded from ci-files.testing.ansible.com, which this kind of machine cannot
# reach; it uses a copy cached under ~/.ansible/test/cache instead when present.
# The stand-in uses the interpreter's own ensurepip, then installs the pip version
# ansible-test asked for from PyPI. ensurepip brings setuptools-free pip, so the
# --no-setuptools/--no-wheel flags meant for get-pip are dropped.
install_pip_bootstrap() {
    local pip_version cache_file marker tmp
    pip_version="$("$venv_bin/python" - <<'PY'
import pathlib
import re

import ansible_test

source = pathlib.Path(ansible_test.__file__).parent / '_internal' / 'python_requirements.py'
match = re.search(r"default_packages = dict\(\s*pip='([0-9.]+)'", source.read_text())
if not match:
    raise SystemExit('sanity: cannot find the pip version in %s' % source)
print(match.group(1))
PY
)"
    cache_file="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
    marker='# arvados_ops.recovery offline get-pip stand-in'
    if [[ -f "$cache_file" ]] && ! grep -qxF "$marker" "$cache_file"; then
        echo "sanity: using the existing pip bootstrap $cache_file"
        return
    fi
    mkdir -p "$(dirname "$cache_file")"
    tmp="$(mktemp "$cache_file.XXXXXX")"
    cat >"$tmp" <<PY
$marker
# Written by scripts/sanity.sh; see the comment there.
import subprocess
import sys

pip_args = [arg for arg in sys.argv[1:] if arg not in ('--no-setuptools', '--no-wheel')]
subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade', '--default-pip'])
sys.exit(subprocess.call([sys.executable, '-m', 'pip', 'install'] + pip_args))
PY
    if cmp -s "$tmp" "$cache_file"; then
        rm -f "$tmp"
    else
        mv -f "$tmp" "$cache_file"
        echo "sanity: wrote the offline pip bootstrap $cache_file"
    fi
}

# Mirrors the repository into the copy: the files git lists (tracked and
# untracked-but-not-ignored), minus galaxy.yml's build_ignore patterns except
# those under tests/. Unchanged files are not rewritten, files gone from the
# repository are removed from the copy.
sync_copy() {
    mkdir -p "$copy_dir"
    "$venv_bin/python" - "$repo_root" "$copy_dir" <<'PY'
import fnmatch
import os
import shutil
import subprocess
import sys

import yaml

repo_root, copy_dir = sys.argv[1], sys.argv[2]
with open(os.path.join(repo_root, 'galaxy.yml'), encoding='utf-8') as galaxy_file:
    build_ignore = yaml.safe_load(galaxy_file).get('build_ignore') or []
ignored = [pattern for pattern in build_ignore if not pattern.startswith('tests')]
# ansible-test's own output must never be copied back in.
ignored.append('tests/output')


def is_ignored(rel_path):
    parts = rel_path.split('/')
    prefixes = ['/'.join(parts[:depth]) for depth in range(1, len(parts) + 1)]
    if '__pycache__' in parts:
        return True
    return any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes for pattern in ignored)


def same_content(path_a, path_b):
    if os.path.getsize(path_a) != os.path.getsize(path_b):
        return False
    with open(path_a, 'rb') as file_a, open(path_b, 'rb') as file_b:
        return file_a.read() == file_b.read()


wanted = set()
listed = subprocess.run(['git', '-C', repo_root, 'ls-files', '-z', '-co', '--exclude-standard'],
                        check=True, stdout=subprocess.PIPE).stdout.decode('utf-8')
for rel_path in listed.split('\0'):
    source = os.path.join(repo_root, rel_path)
    # git still lists tracked files deleted from the work tree.
    if not rel_path or is_ignored(rel_path) or not os.path.isfile(source):
        continue
    wanted.add(rel_path)
    target = os.path.join(copy_dir, rel_path)
    if os.path.islink(target) or not os.path.isfile(target) or not same_content(source, target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.unlink(target)
        shutil.copy2(source, target)
    else:
        shutil.copymode(source, target)

for dir_path, dir_names, file_names in os.walk(copy_dir, topdown=True):
    rel_dir = os.path.relpath(dir_path, copy_dir)
    if rel_dir == '.':
        dir_names[:] = [name for name in dir_names if name != '.git']
    elif rel_dir == 'tests':
        dir_names[:] = [name for name in dir_names if name != 'output']
    for name in file_names:
        rel_path = os.path.normpath(os.path.join(rel_dir, name))
        if rel_path not in wanted:
            os.unlink(os.path.join(dir_path, name))
for dir_path, dir_names, file_names in os.walk(copy_dir, topdown=False):
    rel_dir = os.path.relpath(dir_path, copy_dir)
    if rel_dir != '.' and not rel_dir.startswith(('.git', 'tests/output')) and not os.listdir(dir_path):
        os.rmdir(dir_path)
PY
}

commit_copy() {
    if [[ ! -d "$copy_dir/.git" ]]; then
        git -C "$copy_dir" init --quiet
        git -C "$copy_dir" config user.name 'arvados_ops.recovery sanity'
        git -C "$copy_dir" config user.email 'sanity@localhost'
        git -C "$copy_dir" config commit.gpgsign false
    fi
    # Otherwise pylint and friends would test ansible-test's virtualenvs.
    printf '/tests/output/\n' >"$copy_dir/.git/info/exclude"
    git -C "$copy_dir" add --all
    if ! git -C "$copy_dir" diff --cached --quiet 2>/dev/null || ! git -C "$copy_dir" rev-parse -q --verify HEAD >/dev/null; then
        git -C "$copy_dir" commit --quiet --allow-empty -m "sanity snapshot of $repo_root"
    fi
}

echo "sanity: preparing the offline pip bootstrap"
install_pip_bootstrap
echo "sanity: syncing the collection into ${copy_dir#"$repo_root"/}"
sync_copy
commit_copy

echo "sanity: ansible-test sanity --venv --python $python_version"
cd "$copy_dir"
exec "$venv_bin/ansible-test" sanity --venv --python "$python_version" --color no "$@"
