#!/usr/bin/env python3
"""Writes kube-sim's protobuf schema table from two crates in the cargo registry.

- k8s-pb (the kube-rs organisation's prost bindings, generated from
  Kubernetes' own .proto files) gives every message, its field numbers, wire
  types and nested message types;
- k8s-openapi gives the JSON name of each field (prost's snake_case names
  lose the capitals of `podIPs` or `volumeID`), and tells which proto fields
  Go embeds inline in JSON (`Probe.handler`, `Volume.volumeSource`).

The table is data, read by `crates/kube-sim/src/protobuf/schema.rs` at start;
the Rust test suite checks it against k8s-pb's prost types by round trip.

    tools/protoschema/generate.py           # rewrite the table
    tools/protoschema/generate.py --check   # exit 1 if the table is stale

Lines of the table:
    V <k8s-pb version> <Kubernetes version its protos follow> <k8s-openapi version>
      <Kubernetes version of the Go types merged in>
    G <apiVersion> <package>          a served group version and its proto package
    M <package>.<Message>             a message; its fields follow
    F <number> <label> <type> <json> <flags>
        label: one | many | map | inline;
        type: string int32 int64 bool double bytes, or a message name;
        flags: p (Go holds it behind a pointer), o (its JSON tag says
        omitempty), both, - (neither), or ? (not in the Go types)

Pointer and omitempty facts, and every message and field Kubernetes added
after k8s-pb's release, come from the Go types of k8s.io/api v0.37.2
(tools/protoschema/gofields, output checked in as k8s-1.37.2-go-fields.txt).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/kube-sim/src/protobuf/k8s.schema"
# The Kubernetes release k8s-pb 0.9 generated its bindings from (its newest
# fields are 1.34's, e.g. PodSpec.hostnameOverride).
PROTO_K8S_VERSION = "1.34"
OPENAPI_DIR = "v1_37"
GO_K8S_VERSION = "1.37.2"

# JSON names of fields in messages k8s-openapi has no struct for, where
# camel-casing the prost name would lose an acronym's capitals.
OVERRIDES = {
    "api.core.v1.PodLogOptions.insecure_skip_tls_verify_backend": "insecureSkipTLSVerifyBackend",
    "api.storage.v1beta1.CSINodeDriver.node_id": "nodeID",
    "kube_aggregator.pkg.apis.apiregistration.v1beta1.APIServiceSpec.insecure_skip_tls_verify": "insecureSkipTLSVerify",
}

SCALARS = {"string", "int32", "int64", "bool", "double", "bytes"}


def crate_dirs():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--manifest-path", str(ROOT / "Cargo.toml")],
        check=True, capture_output=True, text=True,
    ).stdout
    dirs = {}
    for package in json.loads(out)["packages"]:
        if package["name"] in ("k8s-pb", "k8s-openapi"):
            dirs[package["name"]] = (Path(package["manifest_path"]).parent, package["version"])
    missing = {"k8s-pb", "k8s-openapi"} - dirs.keys()
    if missing:
        sys.exit(f"generate.py: cargo metadata does not list {sorted(missing)} (kube-sim must depend on them)")
    return dirs


def resolve(module, path):
    parts = path.split("::")
    segments = list(module)
    while parts and parts[0] == "super":
        parts.pop(0)
        segments.pop()
    if parts and parts[0] == "crate":
        parts.pop(0)
        segments = []
    return ".".join(segments + parts)


def inner_type(decl):
    """The message type path in a prost field declaration."""
    ty = decl.split(":", 1)[1].strip().rstrip(",")
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        if ty.startswith(wrapper):
            ty = ty[len(wrapper):-1]
    if ty.startswith("::prost::alloc::collections::BTreeMap<"):
        ty = ty[len("::prost::alloc::collections::BTreeMap<"):-1]
        ty = ty.replace(" ", "").split(",", 1)[1].strip()
    return ty.replace(" ", "").rstrip(",")


ATTR = re.compile(r'#\[prost\((.*)\)\]')


def parse_k8s_pb(src):
    messages = {}  # name -> list of (number, label, type, rust_name)
    resources = {}  # message -> apiVersion
    for path in sorted(src.rglob("mod.rs")):
        module = list(path.parent.relative_to(src).parts)
        lines = path.read_text().splitlines()
        current = None
        attr = None
        decl = None
        impl_for = None
        for line in lines:
            m = re.match(r"pub struct (\w+) \{", line)
            if m:
                current = resolve(module, m.group(1))
                messages[current] = []
                continue
            m = re.match(r"impl crate::Resource for (\w+) \{", line)
            if m:
                impl_for = resolve(module, m.group(1))
                continue
            m = re.match(r'\s+const API_VERSION: &\'static str = "([^"]*)";', line)
            if m and impl_for:
                resources[impl_for] = m.group(1)
                impl_for = None
                continue
            if current is None:
                continue
            if line == "}":
                current = None
                continue
            m = ATTR.search(line)
            if m:
                attr = m.group(1)
                decl = None
                continue
            if attr is not None:
                decl = (decl + " " if decl else "") + line.strip()
                if not decl.endswith(",") or decl.count("<") != decl.count(">"):
                    continue
                messages[current].append(field(module, attr, decl))
                attr = None
    return messages, resources


def field(module, attr, decl):
    number = int(re.search(r'tag = "(\d+)"', attr).group(1))
    rust = decl.split(":", 1)[0].replace("pub ", "").strip().removeprefix("r#")
    kind = attr.split(",", 1)[0].strip()
    if kind.startswith("btree_map"):
        value = re.search(r'btree_map = "string, (\w+)"', attr).group(1)
        ty = resolve(module, inner_type(decl)) if value == "message" else value
        return (number, "map", ty, rust)
    label = "many" if "repeated" in attr else "one"
    if kind == "message":
        return (number, label, resolve(module, inner_type(decl)), rust)
    if kind.startswith("bytes"):
        kind = "bytes"
    if kind not in SCALARS:
        sys.exit(f"generate.py: unhandled prost field kind {kind!r} in {decl}")
    return (number, label, kind, rust)


def parse_openapi(src):
    """(module.Struct) -> JSON names, from the custom Deserialize impls."""
    names = {}
    for path in sorted(src.rglob("*.rs")):
        text = path.read_text()
        m = re.search(r"pub struct (\w+)", text)
        if not m:
            continue
        module = list(path.parent.relative_to(src).parts)
        keys = re.findall(r'"([^"]+)" => Field::Key_\w+', text)
        names[".".join(module + [m.group(1)]).lower()] = keys
    return names


GO_FIELDS = ROOT / "tools/protoschema/k8s-1.37.2-go-fields.txt"


def parse_go_fields():
    """The Go types of Kubernetes 1.37.2 (tools/protoschema/gofields):
    message -> {number: (label, type, json, pointer, omitempty)}."""
    types = {}
    current = None
    for line in GO_FIELDS.read_text().splitlines():
        if line.startswith("T "):
            current = types.setdefault(line[2:], {})
        elif line.startswith("P ") and current is not None:
            _, number, label, ty, json_name, ptr, omit = line.split(" ")
            current[int(number)] = (label, ty, json_name, ptr == "true", omit == "true")
    return types


def squash(name):
    return name.replace("_", "").replace("-", "").replace("$", "").lower()


def camel(rust):
    head, *rest = rust.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def json_keys(messages, openapi, name, depth=0):
    """Every JSON key a message shows, its inline fields' keys included."""
    keys = set(openapi.get(name, []))
    return keys


def build(messages, openapi, go_types):
    out = {}
    fallbacks = []
    added = []
    lower = {name.lower(): name for name in messages}
    # Messages only Kubernetes 1.35-1.37 has: taken from the Go types whole.
    for go_name, go_fields in go_types.items():
        if go_name.lower() not in lower:
            messages[go_name] = []
            lower[go_name.lower()] = go_name
            added.append(go_name)

    def local(ty):
        return lower.get(ty.lower(), ty) if "." in ty else ty

    # An inlined struct k8s-openapi has no struct of its own for (VolumeSource,
    # ProbeHandler) takes its JSON names from the struct it is inlined in.
    openapi = dict(openapi)
    for name, fields in messages.items():
        known = openapi.get(name.lower())
        if known is None:
            continue
        squashed = {squash(k) for k in known}
        for _, _, ty, rust in fields:
            if squash(rust) in squashed or ty not in messages:
                continue
            inner = {squash(f[3]) for f in messages[ty]}
            if inner and inner <= squashed:
                openapi.setdefault(ty.lower(), [k for k in known if squash(k) in inner])
    for name, fields in messages.items():
        go = {}
        for go_name, go_fields in go_types.items():
            if go_name.lower() == name.lower():
                go = go_fields
        known = openapi.get(name.lower())
        by_squash = {squash(k): k for k in known} if known is not None else {}
        rows = []
        numbers = set()
        for number, label, ty, rust in sorted(fields):
            numbers.add(number)
            if number in go:
                go_label, _, go_json, ptr, omit = go[number]
                flags = ("p" if ptr else "") + ("o" if omit else "") or "-"
                if go_label == "inline":
                    rows.append((number, "inline", ty, rust, flags))
                else:
                    rows.append((number, label, ty, go_json, flags))
                continue
            json_name = by_squash.get(squash(rust))
            if json_name is None and known is not None and ty in messages:
                # Go embeds the struct inline: its fields are the parent's JSON keys.
                inner = {squash(f[3]) for f in messages[ty]}
                if inner and inner <= set(by_squash):
                    rows.append((number, "inline", ty, rust, "?"))
                    continue
            json_name = json_name or OVERRIDES.get(f"{name}.{rust}")
            if json_name is None:
                json_name = camel(rust)
                if known is not None or not name.startswith("apimachinery.pkg.apis.testapigroup"):
                    fallbacks.append(f"{name}.{rust}")
            rows.append((number, label, ty, json_name, "?"))
        # Fields Kubernetes added after k8s-pb's release.
        for number, (label, ty, json_name, ptr, omit) in sorted(go.items()):
            if number in numbers:
                continue
            if ty.startswith("?"):
                sys.exit(f"generate.py: {name}.{json_name} has a Go type with no protobuf form: {ty}")
            flags = ("p" if ptr else "") + ("o" if omit else "") or "-"
            rows.append((number, label, local(ty), json_name, flags))
            if name not in added:
                added.append(f"{name}.{json_name}")
        out[name] = sorted(rows)
    return out, fallbacks, added


def render(dirs, messages, resources, table, fallbacks, added):
    pb_dir, pb_version = dirs["k8s-pb"]
    _, openapi_version = dirs["k8s-openapi"]
    lines = [
        "# Generated by tools/protoschema/generate.py from k8s-pb and k8s-openapi; do not edit.",
        f"# {len(table)} messages; {len(fallbacks)} field names not found in k8s-openapi were camel-cased;",
        f"# {len(added)} messages and fields newer than k8s-pb's Kubernetes {PROTO_K8S_VERSION} come from the Go types of 1.37.2.",
        f"V {pb_version} {PROTO_K8S_VERSION} {openapi_version} {GO_K8S_VERSION}",
    ]
    groups = {}
    for message, api_version in resources.items():
        groups.setdefault(api_version, message.rsplit(".", 1)[0])
    for api_version in sorted(groups):
        lines.append(f"G {api_version} {groups[api_version]}")
    for name in sorted(table):
        lines.append(f"M {name}")
        for number, label, ty, json_name, flags in table[name]:
            lines.append(f"F {number} {label} {ty} {json_name} {flags}")
    return "\n".join(lines) + "\n"


def main():
    dirs = crate_dirs()
    messages, resources = parse_k8s_pb(dirs["k8s-pb"][0] / "src")
    openapi = parse_openapi(dirs["k8s-openapi"][0] / "src" / OPENAPI_DIR)
    table, fallbacks, added = build(messages, openapi, parse_go_fields())
    text = render(dirs, messages, resources, table, fallbacks, added)
    if "--verbose" in sys.argv:
        for a in added:
            print("from Go 1.37.2:", a, file=sys.stderr)
    if "--verbose" in sys.argv:
        for f in fallbacks:
            print("camel-cased:", f, file=sys.stderr)
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit(f"generate.py: {OUT.relative_to(ROOT)} is stale; run tools/protoschema/generate.py")
        return
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(table)} messages, {len(fallbacks)} camel-cased names", file=sys.stderr)


if __name__ == "__main__":
    main()
