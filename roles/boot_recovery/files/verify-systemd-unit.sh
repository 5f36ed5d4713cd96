#!/bin/sh
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Usage: verify-systemd-unit UNIT-NAME FILE
# Checks FILE as the systemd unit UNIT-NAME with `systemd-analyze verify`, for
# Ansible's `validate:` (whose temporary file has no unit suffix, which systemd
# needs). systemd-analyze exits 0 after some findings, an unknown Type= value
# among them, and only warns: any output at all counts as a failure here.
set -u
if [ $# -ne 2 ]; then
    echo "usage: verify-systemd-unit UNIT-NAME FILE" >&2
    exit 2
fi
unit_name=$1
unit_file=$2
work_dir=$(mktemp -d) || exit 1
trap 'rm -rf "$work_dir"' EXIT
cp "$unit_file" "$work_dir/$unit_name" || exit 1
output=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$work_dir/$unit_name" 2>&1)
status=$?
if [ "$status" -ne 0 ] || [ -n "$output" ]; then
    printf '%s\n' "$output" | sed "s|$work_dir/||g" >&2
    echo "verify-systemd-unit: $unit_name is refused (systemd-analyze verify exit $status, output above)" >&2
    exit 1
fi
