#!/usr/bin/env bash
# A Debian 13 (trixie) root filesystem whose Python 3.13 runs the controllers of
# ansible-core 2.20 and 2.21 where this machine has no Python 3.12 or later (a plain
# Debian 12 without pyenv). The version stage (scripts/versions.sh) falls back to it.
# Made with debootstrap, as the Molecule images are (scripts/build-molecule-image.sh).
#
#   scripts/controller-rootfs.sh build        make it once, or say that it is there
#   scripts/controller-rootfs.sh run CMD...   run CMD in it, in the current directory
#
# `run` gives CMD a mount namespace of its own (unshare), so every mount goes away with
# it: /proc, /dev and /sys, this checkout and its git directory at the paths they have
# outside (the virtualenvs made in there live in the checkout's .build/), and the host's
# DNS, CA store and pip configuration, so that pip reaches the package index as it does
# outside. HOME is the rootfs's /root: ansible-test's virtualenvs there never collide
# with a sanity run outside.
#
# Environment: CONTROLLER_ROOTFS (default: .build/controller-rootfs),
# DEBIAN_MIRROR (default: deb.debian.org).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root=$(realpath -m "${CONTROLLER_ROOTFS:-$repo_root/.build/controller-rootfs}")
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
# python3-venv: the virtualenvs; git: ansible-test lists the collection's files with it.
packages=python3,python3-venv,git,ca-certificates
# What the tree was made from; another list or suite makes it again.
stamp=$root/.arvados-recovery-rootfs

say() { echo "controller-rootfs: $*" >&2; }

need_root_tools() {
  local tool missing=()
  for tool in "$@"; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    say "missing: ${missing[*]} (Debian: apt-get install debootstrap util-linux)"
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    say "debootstrap, unshare and chroot need root"
    exit 1
  fi
}

build() {
  need_root_tools debootstrap
  if [ "$(cat "$stamp" 2>/dev/null)" = "$suite $packages" ]; then
    say "$root exists ($suite: $packages)"
    return 0
  fi
  local began=$SECONDS building=$root.building
  say "debootstrap $suite into $root (1 to 4 minutes)"
  rm -rf "$building"
  mkdir -p "$(dirname "$root")"
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$building" "$mirror" \
    >"$root.log" 2>&1; then
    tail -n 20 "$root.log" >&2
    say "debootstrap failed; the whole log is $root.log"
    rm -rf "$building"
    return 1
  fi
  rm -rf "$building"/var/lib/apt/lists/* "$building"/var/cache/apt/*.bin "$building"/var/cache/apt/archives/*.deb
  echo "$suite $packages" >"$building/.arvados-recovery-rootfs"
  rm -rf "$root"
  mv "$building" "$root"
  say "built in $((SECONDS - began)) s"
}

# bind SOURCE [ro]: SOURCE at the same path inside, when it exists outside.
bind() {
  local source=$1 target=$root$1
  [ -e "$source" ] || return 0
  if [ -d "$source" ]; then mkdir -p "$target"; else mkdir -p "$(dirname "$target")" && touch "$target"; fi
  mount --bind "$source" "$target"
  if [ "${2:-}" = ro ]; then mount -o remount,bind,ro "$target"; fi
}

# Inside the new mount namespace: the mounts, then CMD in the chroot.
enter() {
  local cwd=$1 git_dir=$2
  shift 2
  mount --make-rprivate /
  mount --rbind /dev "$root/dev"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  bind "$repo_root"
  case "$git_dir" in "$repo_root"/*) ;; *) bind "$git_dir" ;; esac
  bind /etc/resolv.conf ro
  bind /etc/ssl/certs ro
  bind /etc/pip.conf ro
  if [ -d "$HOME/.config/pip" ]; then
    mkdir -p "$root/root/.config/pip"
    mount --bind "$HOME/.config/pip" "$root/root/.config/pip"
  fi
  # shellcheck disable=SC2016 # $1 and $@ are the inner shell's
  exec chroot "$root" /usr/bin/env -u PYTHONPATH -u VIRTUAL_ENV -u PYENV_VERSION \
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$cwd" "$@"
}

run() {
  need_root_tools unshare chroot
  if [ ! -f "$stamp" ]; then
    say "$root is not built: scripts/controller-rootfs.sh build"
    exit 1
  fi
  local git_dir
  git_dir=$(git -C "$repo_root" rev-parse --path-format=absolute --git-common-dir)
  exec unshare --mount -- "$0" enter "$PWD" "$git_dir" "$@"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  enter) shift; enter "$@" ;;
  *) echo "usage: $0 build | run CMD..." >&2; exit 2 ;;
esac
