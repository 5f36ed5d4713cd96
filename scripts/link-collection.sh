#!/usr/bin/env bash
# Exposes the working tree as the installed collection arvados_ops.recovery:
# ansible.cfg puts .build/collections first on the collections path.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

namespace_dir=.build/collections/ansible_collections/arvados_ops
link="$namespace_dir/recovery"

mkdir -p "$namespace_dir"
if [[ -L "$link" && "$(readlink "$link")" == "$repo_root" ]]; then
    echo "link-collection: $link -> $repo_root (already there)"
    exit 0
fi
if [[ -e "$link" && ! -L "$link" ]]; then
    echo "link-collection: $link exists and is not a symlink; remove it first" >&2
    exit 1
fi
# -n replaces an existing link instead of creating one inside its target.
ln -sfn "$repo_root" "$link"
echo "link-collection: $link -> $repo_root"
