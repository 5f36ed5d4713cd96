#!/usr/bin/env bash
# Builds an image of the Molecule scenarios from Debian's packages, without a
# registry: a debootstrapped Debian release (minbase) with systemd as PID 1, Python
# and what arvados-fail-jobs needs, imported into podman. Two images per release:
#   base     localhost/arvados-recovery-molecule:RELEASE (about a minute), for
#            the one-container scenarios;
#   cluster  localhost/arvados-recovery-molecule-cluster:RELEASE, the same plus
#            PostgreSQL, munge, Slurm (slurmctld, slurmd, clients), Prometheus and
#            node_exporter (both disabled), for the `cluster` and `installer`
#            scenarios (a few minutes; no daemon runs during the build, and no
#            database cluster or munge key is made: the scenario makes them).
# Each release with its own packages (the tag is the release's code name):
#   bullseye  Debian 11: Python 3.9, psycopg2 2.8.6, PostgreSQL 13, Slurm 20.11
#   bookworm  Debian 12: Python 3.11, psycopg 3.1, PostgreSQL 15, Slurm 22.05 (default)
#   trixie    Debian 13: Python 3.13, psycopg 3.2, PostgreSQL 17, Slurm 24.11
# An image that exists already is kept (build once, reuse). --force builds it again.
#
#   scripts/build-molecule-image.sh [--force] [base|cluster] [bullseye|bookworm|trixie]
#
# Environment: MOLECULE_DEBIAN_RELEASE (the release when none is named; default
# bookworm), MOLECULE_IMAGE (image name), DEBIAN_MIRROR (default: deb.debian.org),
# CONTAINERS_CONF (default: extensions/molecule/containers.conf).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo_root/extensions/molecule/containers.conf}
# The image records what it was built from; a change of the lists rebuilds it.
label=arvados-recovery.packages

force=no kind=base release=${MOLECULE_DEBIAN_RELEASE:-bookworm}
usage="usage: $0 [--force] [base|cluster] [bullseye|bookworm|trixie]"
for arg in "$@"; do
  case "$arg" in
    --force) force=yes ;;
    base|cluster) kind=$arg ;;
    bullseye|bookworm|trixie) release=$arg ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
# The psycopg the release packages and its PostgreSQL: Debian 11 has only psycopg2.
case "$release" in
  bullseye) psycopg=python3-psycopg2 postgresql=postgresql-13 ;;
  bookworm) psycopg=python3-psycopg postgresql=postgresql-15 ;;
  trixie) psycopg=python3-psycopg postgresql=postgresql-17 ;;
  *) echo "build-molecule-image: unknown Debian release '$release' ($usage)" >&2; exit 2 ;;
esac
# The psycopg and python3-yaml are what the boot_recovery role installs: having
# them in the image saves an apt-get update in every converge (the role still checks).
# systemd-analyze (in systemd) is what the roles validate their units with.
packages=python3,python3-apt,systemd,systemd-sysv,dbus,$psycopg,python3-yaml
# What the cluster image adds, installed with apt in the debootstrapped tree after a
# policy-rc.d that keeps every daemon from starting (on the build host) meanwhile.
# Debian 13 keeps the Slurm packages' names (it adds sackd, which nothing here needs).
# Debian's prometheus and prometheus-node-exporter: the installer scenario's monitoring
# (no daemon of them starts unless a scenario enables it); procps for the /bin/kill of
# prometheus.service's ExecReload, which minbase lacks.
cluster_packages=("$postgresql" munge slurmctld slurmd slurm-client prometheus prometheus-node-exporter procps)

if [ "$kind" = cluster ]; then
  image=${MOLECULE_IMAGE:-localhost/arvados-recovery-molecule-cluster:$release}
  built_with=$packages+${cluster_packages[*]}
  build_dir=$repo_root/.build/molecule-image-cluster-$release
else
  image=${MOLECULE_IMAGE:-localhost/arvados-recovery-molecule:$release}
  built_with=$packages
  build_dir=$repo_root/.build/molecule-image-$release
fi

missing=()
for tool in podman debootstrap runc; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "build-molecule-image: missing: ${missing[*]} (Debian: apt-get install podman runc debootstrap)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "build-molecule-image: debootstrap needs root" >&2
  exit 1
fi

if [ "$force" = no ] && podman image exists "$image"; then
  built_from=$(podman image inspect --format "{{ index .Config.Labels \"$label\" }}" "$image" 2>/dev/null || true)
  if [ "$built_from" = "$built_with" ]; then
    echo "build-molecule-image: $image exists (packages: $built_with)"
    exit 0
  fi
  echo "build-molecule-image: $image was built from other packages ('$built_from'): rebuilding"
fi

root=$build_dir/rootfs
# debootstrap of trixie leaves the tree's /proc mounted (the host's processes): it must
# neither go into the image nor be under rm -rf. Lazily, since it can still be busy.
unmount_tree() {
  findmnt --raw --noheadings --output TARGET | awk -v root="$root/" 'index($0, root) == 1' |
    sort --reverse | while read -r target; do umount --lazy "$target"; done
}
remove_tree() {
  unmount_tree
  rm -rf --one-file-system "$root"
}
remove_tree
mkdir -p "$build_dir"
trap remove_tree EXIT

begin=$SECONDS
echo "build-molecule-image: debootstrap $release into $root (about 40 s)"
if ! debootstrap --variant=minbase --include="$packages" "$release" "$root" "$mirror" \
    >"$build_dir/debootstrap.log" 2>&1; then
  tail -n 20 "$build_dir/debootstrap.log" >&2
  echo "build-molecule-image: debootstrap failed; the whole log is $build_dir/debootstrap.log" >&2
  exit 1
fi
if [ "$kind" = cluster ]; then
  echo "build-molecule-image: apt-get install ${cluster_packages[*]}"
  # No daemon starts in the build tree; no database cluster is made (the scenario
  # makes one at prepare, so each container has its own).
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 0755 "$root/usr/sbin/policy-rc.d"
  mkdir -p "$root/etc/postgresql-common/createcluster.d"
  echo 'create_main_cluster = false' >"$root/etc/postgresql-common/createcluster.d/no-main.conf"
  if ! { chroot "$root" apt-get update &&
         chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install --yes \
           --no-install-recommends "${cluster_packages[@]}"; } >"$build_dir/apt.log" 2>&1; then
    tail -n 20 "$build_dir/apt.log" >&2
    echo "build-molecule-image: apt-get failed; the whole log is $build_dir/apt.log" >&2
    exit 1
  fi
  rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/munge/munge.key"
  # Debian enables both Slurm daemons. From 24.11 (trixie) slurmd also starts without a
  # slurm.conf (configless: it looks for slurmctld in DNS and retries), so the first boot
  # waits 90 s for its start to time out; the scenario enables each host's own daemon.
  # Prometheus and node_exporter would run on every host of every scenario: only the
  # installer scenario's monitoring host enables them.
  chroot "$root" systemctl disable --quiet slurmd.service slurmctld.service \
    prometheus.service prometheus-node-exporter.service
fi
unmount_tree
# A container has no consoles to log in on and no hardware to wait for; these
# units would only slow the boot down or fail in it.
for unit in getty.target console-getty.service systemd-udevd.service \
    systemd-udev-trigger.service systemd-remount-fs.service systemd-firstboot.service \
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount; do
  ln -sfn /dev/null "$root/etc/systemd/system/$unit"
done
# The apt lists and cached .debs are the bulk of a minbase tree and of no use here.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
# Debian's machine-id is made at first boot; an empty file lets systemd make a new one.
: >"$root/etc/machine-id"

echo "build-molecule-image: importing as $image"
tar -C "$root" --one-file-system -c . | podman import \
  --change 'CMD=["/lib/systemd/systemd"]' \
  --change 'STOPSIGNAL=SIGRTMIN+3' \
  --change "LABEL $label=$built_with" \
  --quiet - "$image" >/dev/null
echo "build-molecule-image: $image built in $((SECONDS - begin)) s"
