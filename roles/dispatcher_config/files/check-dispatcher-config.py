# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks a crunch-dispatch-slurm configuration before it replaces the one in use.

Usage: python3 check-dispatcher-config --format legacy FILE
       python3 check-dispatcher-config --format cluster --cluster-id ID FILE
FILE may be '-' for standard input.

legacy: the 1.x /etc/arvados/crunch-dispatch-slurm/crunch-dispatch-slurm.yml
(Client.APIHost and Client.AuthToken required; the dispatcher has defaults for the rest).
cluster: /etc/arvados/config.yml; the keys of Clusters.<ID>.Containers it checks are
optional (Arvados has defaults for them). With --job-name-template (Arvados 3.2 and
later), a SbatchArgumentsList there must hold --job-name=%U, which names the Slurm job
after the container.

Durations must be written as Arvados reads them (Go's time.ParseDuration): `10s`,
`1m30s`, `500ms`, or `0`. Exit 0 when the file is fine; 1 with one line per problem on
stderr otherwise. No value is ever printed: the file holds tokens and passwords.
Python 3 with PyYAML (Debian: python3-yaml), nothing else.
"""

from __future__ import annotations

import argparse
import re
import sys

DURATION = re.compile(r"0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+")
BYTE_SIZE = re.compile(r"[0-9]+(?:\.[0-9]+)?\s*(?:[KMGTPE]i?B?|B)?", re.IGNORECASE)
CLUSTER_ID = re.compile(r"[a-z0-9]{5}")
JOB_NAME = "--job-name=%U"
MISSING = object()


class Checker:
    """Collects the problems of one document; each check names the key it looked at."""

    def __init__(self):
        self.problems = []

    def fail(self, path, text):
        self.problems.append("%s: %s" % (path, text))

    def get(self, mapping, path, key, required):
        value = mapping.get(key, MISSING) if isinstance(mapping, dict) else MISSING
        if value is MISSING and required:
            self.fail(path, "is required")
        return value

    def mapping(self, parent, path, key, required=True):
        value = self.get(parent, path, key, required)
        if value is MISSING:
            return {}
        if not isinstance(value, dict):
            self.fail(path, "must be a mapping")
            return {}
        return value

    def duration(self, parent, path, key, required=False):
        value = self.get(parent, path, key, required)
        if value is MISSING:
            return
        if not isinstance(value, str) or not DURATION.fullmatch(value.strip()):
            self.fail(path, "must be a duration such as '10s' or '1m30s'")

    def text(self, parent, path, key, required=False):
        value = self.get(parent, path, key, required)
        if value is MISSING:
            return
        if not isinstance(value, str) or not value.strip():
            self.fail(path, "must be a non-empty string")

    def string_list(self, parent, path, key, required=False, non_empty=False):
        value = self.get(parent, path, key, required)
        if value is MISSING:
            return
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.fail(path, "must be a list of strings")
        elif non_empty and not value:
            self.fail(path, "must not be empty")

    def count(self, parent, path, key, required=False):
        value = self.get(parent, path, key, required)
        if value is MISSING:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(path, "must be a whole number, 0 or more")

    def byte_size(self, parent, path, key):
        value = self.get(parent, path, key, False)
        if value is MISSING:
            return
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return
        if not isinstance(value, str) or not BYTE_SIZE.fullmatch(value.strip()):
            self.fail(path, "must be a number of bytes or a size such as '550MiB'")

    def boolean(self, parent, path, key):
        value = self.get(parent, path, key, False)
        if value is not MISSING and not isinstance(value, bool):
            self.fail(path, "must be true or false")


def check_legacy(document, checker):
    client = checker.mapping(document, "Client", "Client")
    checker.text(client, "Client.APIHost", "APIHost", required=True)
    checker.text(client, "Client.AuthToken", "AuthToken", required=True)
    checker.boolean(client, "Client.Insecure", "Insecure")
    checker.string_list(client, "Client.KeepServiceURIs", "KeepServiceURIs")
    checker.string_list(document, "SbatchArguments", "SbatchArguments")
    checker.duration(document, "PollPeriod", "PollPeriod")
    checker.string_list(document, "CrunchRunCommand", "CrunchRunCommand", non_empty=True)
    checker.duration(document, "MinRetryPeriod", "MinRetryPeriod")
    checker.count(document, "PrioritySpread", "PrioritySpread")
    checker.count(document, "ReserveExtraRAM", "ReserveExtraRAM")
    checker.count(document, "BatchSize", "BatchSize")


def check_cluster(document, cluster_id, checker, job_name_template=False):
    clusters = checker.mapping(document, "Clusters", "Clusters")
    prefix = "Clusters.%s" % cluster_id
    cluster = checker.mapping(clusters, prefix, cluster_id)
    prefix += ".Containers"
    containers = checker.mapping(cluster, prefix, "Containers", required=False)
    if not containers:
        return
    checker.text(containers, prefix + ".CrunchRunCommand", "CrunchRunCommand")
    checker.string_list(containers, prefix + ".CrunchRunArgumentsList", "CrunchRunArgumentsList")
    checker.duration(containers, prefix + ".MinRetryPeriod", "MinRetryPeriod")
    checker.byte_size(containers, prefix + ".ReserveExtraRAM", "ReserveExtraRAM")
    cloud_vms = checker.mapping(containers, prefix + ".CloudVMs", "CloudVMs", required=False)
    checker.duration(cloud_vms, prefix + ".CloudVMs.PollInterval", "PollInterval")
    slurm = checker.mapping(containers, prefix + ".SLURM", "SLURM", required=False)
    checker.string_list(slurm, prefix + ".SLURM.SbatchArgumentsList", "SbatchArgumentsList")
    arguments = slurm.get("SbatchArgumentsList")
    if job_name_template and isinstance(arguments, list) and JOB_NAME not in arguments:
        checker.fail(prefix + ".SLURM.SbatchArgumentsList", "must hold %s (the Slurm job name)" % JOB_NAME)
    checker.count(slurm, prefix + ".SLURM.PrioritySpread", "PrioritySpread")


def load(path):
    """(document, problem): the parsed file, or None and why not."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None, "PyYAML is missing on this host (Debian/Ubuntu: python3-yaml)"
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        return None, "cannot read %s: %s" % (path, getattr(error, "strerror", None) or error)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        # PyYAML quotes the offending text, which may be a token: say only where.
        mark = getattr(error, "problem_mark", None)
        where = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        return None, "not valid YAML%s" % where
    if not isinstance(document, dict):
        return None, "must hold a YAML mapping"
    return document, None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="check-dispatcher-config", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--format", choices=("legacy", "cluster"), required=True)
    parser.add_argument("--cluster-id", help="the cluster of config.yml (format cluster)")
    parser.add_argument(
        "--job-name-template",
        action="store_true",
        help="SbatchArgumentsList is the whole sbatch template (Arvados 3.2 and later)",
    )
    parser.add_argument("file", help="the file to check, '-' for standard input")
    args = parser.parse_args(argv)
    if args.format == "cluster" and not (args.cluster_id and CLUSTER_ID.fullmatch(args.cluster_id)):
        parser.error("--format cluster needs --cluster-id: five characters a-z, 0-9")
    document, problem = load(args.file)
    checker = Checker()
    if problem:
        checker.problems.append(problem)
    elif args.format == "legacy":
        check_legacy(document, checker)
    else:
        check_cluster(document, args.cluster_id, checker, args.job_name_template)
    for line in checker.problems:
        sys.stderr.write("check-dispatcher-config: %s\n" % line)
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())
