#!/usr/bin/env bash
# The checks of RELEASING.md before a release's tag is pushed: the changelog lints, the
# version galaxy.yml gives is released in it and written the same everywhere
# (scripts/release_check.py), and the artifact of that version builds and installs
# (scripts/build-check.sh). Exits 1 with what is wrong; on main between releases it says
# what the next release has to do.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
venv_bin="$repo_root/.venv/bin"

echo "release-check: antsibull-changelog lint"
"$venv_bin/antsibull-changelog" lint
"$venv_bin/antsibull-changelog" lint-changelog-yaml changelogs/changelog.yaml
echo "release-check: the version, the changelog and the places that write a version"
"$venv_bin/python" scripts/release_check.py
scripts/build-check.sh

version="$("$venv_bin/python" scripts/release_check.py --print-version)"
if tagged="$(git rev-parse --verify --quiet "refs/tags/$version^{commit}")"; then
    if [[ "$tagged" != "$(git rev-parse HEAD)" ]]; then
        echo "release-check: tag $version exists and is not this commit ($tagged)" >&2
        exit 1
    fi
    echo "release-check: ok: tag $version is this commit; push it: git push origin $version"
else
    echo "release-check: ok: tag this commit and push it: git tag -a $version -m '$version' && git push origin $version"
fi
