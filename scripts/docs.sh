#!/usr/bin/env bash
# Builds the collection's documentation site as the community collections publish theirs
# (`make docs`, the docs stage of `make test`): antsibull-docs makes a page of every module,
# filter and role from their own documentation, adds the guide of docs/docsite/ (extra-docs.yml,
# links.yml, rst/), and Sphinx renders it into .build/docs/build/html/. It fails on:
#   - a plugin or role whose documentation antsibull-docs cannot render or finds wrong
#     (lint-collection-docs --plugin-docs: the schema, a reference to a missing plugin, rstcheck),
#     or a guide page's reference to one (--check-extra-docs-refs);
#   - a filter ansible-doc shows as UNDOCUMENTED;
#   - any Sphinx warning (build.sh's -W --keep-going): a broken reference between pages, a page
#     no table of contents lists, bad RST.
# The scaffolding (conf.py, build.sh) is antsibull-docs sphinx-init's, made afresh in .build/docs
# by each run: only docs/docsite/ is kept in git.
set -euo pipefail
cd "$(dirname "$0")/.."

collection=arvados_ops.recovery
docs_dir=.build/docs
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
# antsibull-docs documents the collection as installed: scripts/link-collection.sh makes the
# checkout that, as it does for the tests.
scripts/link-collection.sh >/dev/null
installed=.build/collections/ansible_collections/arvados_ops/recovery

echo "docs: ansible-doc lists every filter documented"
undocumented=$(ansible-doc -t filter -l "$collection" | grep -i undocumented || true)
if [ -n "$undocumented" ]; then
  echo "docs: filters without documentation (plugins/filter/<name>.yml):" >&2
  echo "$undocumented" >&2
  exit 1
fi

echo "docs: antsibull-docs lint-collection-docs --plugin-docs"
antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs "$installed"

echo "docs: building the site into $docs_dir/build/html"
rm -rf "$docs_dir"
mkdir -p "$docs_dir"
antsibull-docs sphinx-init --use-current --squash-hierarchy --dest-dir "$docs_dir" \
  --no-add-antsibull-docs-version \
  --project "$collection" --copyright "Arvados Ops recovery maintainers" \
  --title "arvados_ops.recovery" --html-short-title "arvados_ops.recovery" \
  "$collection" >/dev/null

# The pages antsibull-docs makes link to a few pages of Ansible's own documentation through
# intersphinx. Its conf.py would fetch Ansible's and Python's whole inventories at every build;
# the build fetches nothing (it runs offline, from PyPI's and Debian's packages only), so it
# reads a small inventory of just those pages, written here, and links to them where they are.
.venv/bin/python - "$docs_dir/ansible_devel.inv" <<'EOF'
import sys
import zlib

# label: (its address under https://docs.ansible.com/projects/ansible/devel/, its title)
PAGES = {
    "common_return_values": ("reference_appendices/common_return_values.html#common-return-values", "Return Values"),
    "ansible_configuration_settings": ("reference_appendices/config.html#ansible-configuration-settings",
                                       "Ansible Configuration Settings"),
}
lines = "".join("%s std:label -1 %s %s\n" % (label, uri, title) for label, (uri, title) in PAGES.items())
with open(sys.argv[1], "wb") as inventory:
    inventory.write(b"# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n")
    inventory.write(b"# The remainder of this file is compressed using zlib.\n")
    inventory.write(zlib.compress(lines.encode()))
EOF
cat >>"$docs_dir/conf.py" <<'EOF'

# scripts/docs.sh: Ansible's pages from a local inventory, nothing fetched.
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', '../ansible_devel.inv'),
}
EOF

"$docs_dir/build.sh"
echo "docs: the site is $docs_dir/build/html/index.html"
