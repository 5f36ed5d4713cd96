#!/usr/bin/env bash
# Installs what `make test` and `make demo` need on a Debian 12 machine, as root:
# the Debian packages of the lab and the project virtualenv from requirements-dev.txt.
# Every step checks first, so a second run costs a few dpkg and sha256 look-ups.
#
#   scripts/install-deps.sh        everything (root, for the Debian packages)
#   scripts/install-deps.sh venv   only the project virtualenv: what `make unit` needs,
#                                  no apt, no root (a Python 3 with its venv module)
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-all}
case "$MODE" in
  all | venv) ;;
  *) echo "usage: $0 [venv]" >&2; exit 2 ;;
esac

DEBIAN_PACKAGES=(
  postgresql-15        # the lab database (contrib, for pg_trgm, is part of it)
  slurm-wlm            # slurmctld, slurmd and the client tools
  munge                # Slurm's authentication
  catatonit            # a subreaper for slurmd, see lab/labctl.py
  python3-venv         # the project virtualenv
  python3-psycopg      # what the boot-time command uses on a real host
  libpq-dev            # pg_config and libpq's headers, python3-dev and gcc: to build psycopg2
  python3-dev          #   (tests/integration/requirements-psycopg2.txt), which has no wheel
  gcc                  #   for this Python at the version the tests run
  git                  # ansible-test sanity works on a git checkout
  shellcheck           # make lint checks the shell scripts
  podman               # make molecule: containers with systemd as PID 1
  runc                 # the OCI runtime podman uses here (crun refuses hybrid cgroups)
  conmon
  containernetworking-plugins
  fuse-overlayfs
  slirp4netns
  uidmap
  debootstrap          # the Molecule base image is built locally: no registry is reachable
  prometheus           # promtool: the tests check the watch's metrics and alert rules
  prometheus-node-exporter  # a real Prometheus scrapes the watch's textfile through it (integration)
  time                 # GNU time: the benchmarks read a command's peak RSS with it
  openjdk-17-jre-headless  # ansible-rulebook (the event source's tests) runs its rules on Java 17
)

missing_packages() {
  local pkg
  for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || echo "$pkg"
  done
}

install_debian_packages() {
  local missing
  missing=$(missing_packages)
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing Debian packages: $missing (run as root to install them)" >&2
    exit 1
  fi
  echo "install-deps: installing Debian packages: ${missing//$'\n'/ }"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package is what we want
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# Debian's python3; elsewhere (make unit without root) whatever python3 is on PATH.
base_python() {
  if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else command -v python3; fi
}

install_virtualenv() {
  local want have
  want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
  have=$(cat .venv/.requirements.sha256 2>/dev/null || true)
  [ "$want" = "$have" ] && [ -x .venv/bin/python ] && return 0
  echo "install-deps: installing the Python tools into .venv"
  # Debian's own interpreter, so the venv sees the same Python a target host has.
  [ -x .venv/bin/python ] || "$(base_python)" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  echo "$want" > .venv/.requirements.sha256
}

# The Molecule podman driver needs the containers.podman collection, and Galaxy is not
# reachable: take just that collection out of the pinned `ansible` wheel on PyPI, into a
# folder only scripts/molecule.sh puts on the collections path (the whole package would put
# ~400 MB of collections where ansible-lint and sanity look).
ANSIBLE_WHEEL_VERSION=12.3.0
install_molecule_collections() {
  local dir=.build/molecule-collections tmp
  [ -f "$dir/ansible_collections/containers/podman/MANIFEST.json" ] && return 0
  echo "install-deps: extracting containers.podman from ansible==$ANSIBLE_WHEEL_VERSION"
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --no-deps -d "$tmp" "ansible==$ANSIBLE_WHEEL_VERSION"
  .venv/bin/python - "$tmp/ansible-$ANSIBLE_WHEEL_VERSION-py3-none-any.whl" "$dir" <<'PY'
import sys
import zipfile

wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    archive.extractall(dest, [name for name in archive.namelist()
                              if name.startswith('ansible_collections/containers/podman/')])
PY
  rm -rf "$tmp"
}

# The integration stage runs the database modules' tests a second time under psycopg2, at
# the oldest version that runs on this Python (see the file): built from source, so it needs the
# Debian packages above and stays out of the `venv` mode.
PSYCOPG2_REQUIREMENTS=tests/integration/requirements-psycopg2.txt
install_psycopg2() {
  local want have
  want=$(sed -n 's/^psycopg2==//p' "$PSYCOPG2_REQUIREMENTS")
  have=$(.venv/bin/python -c 'import psycopg2; print(psycopg2.__version__.split()[0])' 2>/dev/null || true)
  [ "$want" = "$have" ] && return 0
  echo "install-deps: building psycopg2 $want into .venv"
  .venv/bin/python -m pip install -q --no-binary psycopg2 -r "$PSYCOPG2_REQUIREMENTS"
}

if [ "$MODE" = venv ]; then
  install_virtualenv
  exit 0
fi
install_debian_packages
install_virtualenv
install_psycopg2
install_molecule_collections
