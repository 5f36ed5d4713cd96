"""Reads, from Arvados' own source at a release tag, the keys and value types of the
dispatcher's configuration, and writes them as tests/data/arvados_config/<tag>.json.

    python tests/data/arvados_config/extract.py /path/to/arvados.git 1.4.3 3.2.1 ...

1.x: the struct crunch-dispatch-slurm reads its own file into
(services/crunch-dispatch-slurm/crunch-dispatch-slurm.go: `Config` up to 1.1.3,
`Dispatcher` from 1.1.4; `Client` from sdk/go/arvados/client.go).
2.0 and later: lib/config/config.default.yml, the subtrees of Clusters.xxxxx the
dispatcher reads. Types: str, bool, int, float, list, map (keys of the operator's
choosing), duration (Go's time.ParseDuration), bytesize (bytes or "256MiB").
Every release: how the dispatcher places a container by instance type when
Clusters.<id>.InstanceTypes is configured (`instance_type_placement`, read from
crunch-dispatch-slurm.go: "none", "adds" --constraint=instancetype=<type> to
--mem/--cpus-per-task/--tmp, "replaces" them with it, or "template": from 3.2.0 only
where SbatchArgumentsList has %I), and from 3.2.0 the template's substitutions
(`sbatch_substitutions`, the keys of sbatchArgs' replacement map).
Only facts are kept (names and types), no Arvados code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DISPATCHER_GO = "services/crunch-dispatch-slurm/crunch-dispatch-slurm.go"
CLIENT_GO = "sdk/go/arvados/client.go"
CONFIG_YML = "lib/config/config.default.yml"
CLUSTER_SUBTREES = (
    ("SystemRootToken",),
    ("Services", "Controller"),
    ("Services", "DispatchSLURM"),
    ("TLS",),
    ("PostgreSQL",),
    ("Containers",),
    ("API",),
    ("InstanceTypes",),
)
GO_TYPES = {
    "string": "str",
    "[]string": "list",
    "bool": "bool",
    "int64": "int",
    "int": "int",
    "arvados.Duration": "duration",
}
DURATION = re.compile(r"^([0-9]+(\.[0-9]*)?(ns|us|ms|s|m|h))+$")
BYTE_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?\s*[KMGTPE]i?B$")


def show(repo, tag, path):
    return subprocess.run(
        ["git", "-C", repo, "show", "%s:%s" % (tag, path)], check=True, capture_output=True, text=True
    ).stdout


def go_struct(source, names):
    for name in names:
        match = re.search(r"^type %s struct \{\n(.*?)^\}" % name, source, re.M | re.S)
        if match:
            return name, match.group(1)
    raise SystemExit("no struct %s" % " or ".join(names))


def go_fields(body):
    for line in body.splitlines():
        match = re.match(r"^\s*([A-Z]\w*)\s+(\S+)(\s+`json:\"-\"`)?", line.split("//")[0])
        if match and not match.group(3):
            yield match.group(1), match.group(2)


def instance_type_placement(source):
    if re.search(r'"%I":', source):
        return "template"
    if '"--constraint=instancetype="' not in source:
        return "none"
    # 1.2.0 to 3.1.2 say so where they append it: "use instancetype constraint instead of
    # slurm mem/cpu/tmp specs"; 1.1.4 appends it after --mem, --cpus-per-task and --tmp.
    return "replaces" if "instancetype constraint instead of slurm" in source else "adds"


def sbatch_substitutions(source):
    match = re.search(r"repl := map\[string\]string\{\n(.*?)^\t\}", source, re.M | re.S)
    return sorted(re.findall(r'^\s*"(%.)":', match.group(1), re.M)) if match else []


def dispatcher_facts(repo, tag):
    source = show(repo, tag, DISPATCHER_GO)
    facts = {"instance_type_placement": instance_type_placement(source)}
    if facts["instance_type_placement"] == "template":
        facts["sbatch_substitutions"] = sbatch_substitutions(source)
    return facts


def legacy_keys(repo, tag):
    struct, body = go_struct(show(repo, tag, DISPATCHER_GO), ("Config", "Dispatcher"))
    client_body = go_struct(show(repo, tag, CLIENT_GO), ("Client",))[1]
    keys = {}
    for name, go_type in go_fields(body):
        if go_type == "arvados.Client":
            for client_name, client_type in go_fields(client_body):
                if client_type in GO_TYPES:
                    keys["Client." + client_name] = GO_TYPES[client_type]
        elif go_type in GO_TYPES:
            keys[name] = GO_TYPES[go_type]
    return {
        "tag": tag,
        "format": "legacy",
        "paths": ["%s (struct %s)" % (DISPATCHER_GO, struct), CLIENT_GO],
        "keys": keys,
    }


def value_type(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, str) and DURATION.match(value):
        return "duration"
    if isinstance(value, str) and BYTE_SIZE.match(value):
        return "bytesize"
    return "str"


def flatten(value, prefix, keys):
    if isinstance(value, dict) and value and "SAMPLE" not in value:
        for key, item in value.items():
            flatten(item, prefix + (str(key),), keys)
    else:
        keys[".".join(prefix)] = value_type(value)


def cluster_keys(repo, tag):
    cluster = yaml.safe_load(show(repo, tag, CONFIG_YML))["Clusters"]["xxxxx"]
    keys = {}
    for subtree in CLUSTER_SUBTREES:
        value = cluster
        for key in subtree:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            flatten(value, subtree, keys)
    return {
        "tag": tag,
        "format": "cluster",
        "paths": [CONFIG_YML + " (Clusters.xxxxx)"],
        "keys": keys,
        "sbatch_arguments_default": cluster["Containers"]["SLURM"]["SbatchArgumentsList"],
    }


def main(repo, tags):
    for tag in tags:
        data = legacy_keys(repo, tag) if tag.startswith("1.") else cluster_keys(repo, tag)
        data.update(dispatcher_facts(repo, tag))
        (HERE / ("%s.json" % tag)).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
