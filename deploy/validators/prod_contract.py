"""The GLM-5.3 production contracts, one per generated file (rules in deploy/validators/README.md).

The contract is the one whose deployment is the file's `nearai.otel.deployment` label
(glm53_contract.CONTRACTS); a file no contract binds fails.

  * exact service set (missing and unexpected both reported);
  * per replica: image = its release record, argv = the template with its own chunk, pdi and
    dist-init address (each drifted token reported), environment = the contract, GPU ids;
  * forbidden admission-reserve variables absent from every service;
  * the proxy's backends are exactly the replicas, host-overridable, with conversation affinity;
  * the split gate on the actual argv/env: `--chunked-prefill-size 16384` (or more) requires
    SGLANG_DSA_INDEXER_QSPLIT=1, and QSPLIT=1 requires an image whose release carries the
    dsa-indexer-qsplit patch (v2 and v3 do, v1 does not);
  * outside the engines the file equals the file it derives from (normalized), else the first
    differing dotted path is reported.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping

from tools.oci.reference import pinned_digest
from deploy.validators import cli, nginx_conf
from deploy.validators.compose_doc import (ComposeFile, Finding, InterpolationError, LoadError,
                                           command_argv, env_map, interpolate, join_path, labels_map,
                                           load_yaml_text)
from deploy.validators.glm53_contract import CONTRACTS, FileContract, LongTierOverlay, ReplicaContract
from deploy.releases import ReleaseError, Releases, load_dir, load_files
from deploy.validators.secrets import shown
from deploy.validators.telemetry import collector_config
from deploy.validators.topology import engines, nginx_configs

VALIDATOR = "glm53-prod-contract"
QSPLIT = "SGLANG_DSA_INDEXER_QSPLIT"
SPLIT_REQUIRED_FROM = 16384


# --- argv ---------------------------------------------------------------------------------------

def options(argv: list[str]) -> list[tuple[str, str | None]]:
    """`--flag value` / `--switch` pairs in order; positional tokens keep their own entry."""
    items: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--") and "=" in token:
            flag, value = token.split("=", 1)
            items.append((flag, value))
        elif token.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            items.append((token, argv[i + 1]))
            i += 1
        else:
            items.append((token, None))
        i += 1
    return items


def _render(flag: str, value: str | None) -> str:
    if value is None:
        return flag
    text = shown(flag, value)
    return f"{flag} {value}" if text == repr(value) else f"{flag} {text}"


def argv_findings(compose: ComposeFile, where: str, actual: list[str],
                  expected: list[str]) -> list[Finding]:
    if actual == expected:
        return []
    findings = []
    if actual[:2] != expected[:2]:
        findings.append(compose.finding(where, (
            f"command must start `{' '.join(expected[:2])}`, found `{' '.join(actual[:2])}`")))
    got, want = options(actual[2:]), options(expected[2:])
    got_flags = [f for f, _ in got]
    want_map = dict(want)
    for flag in dict.fromkeys(got_flags):
        count = got_flags.count(flag)
        if count > 1:
            findings.append(compose.finding(where, f"drifted token: `{flag}` given {count} times"))
    got_map = dict(got)
    for flag, value in want:
        if flag not in got_map:
            findings.append(compose.finding(where, f"drifted token: missing `{_render(flag, value)}`"))
        elif got_map[flag] != value:
            findings.append(compose.finding(where, (
                f"drifted token: `{_render(flag, got_map[flag])}`, contract requires "
                f"`{_render(flag, value)}`")))
    for flag, value in got:
        if flag not in want_map:
            findings.append(compose.finding(where, f"drifted token: unexpected `{_render(flag, value)}`"))
    if not findings:
        index = next(i for i, (a, b) in enumerate(zip(actual, expected)) if a != b)
        findings.append(compose.finding(join_path(where, index), (
            f"argv order differs from the contract: `{actual[index]}` where the template has "
            f"`{expected[index]}`")))
    return findings


# --- per replica --------------------------------------------------------------------------------

def _device_ids(service: Mapping[str, Any]) -> list[str] | None:
    try:
        devices = service["deploy"]["resources"]["reservations"]["devices"]
    except (KeyError, TypeError):
        return None
    ids: list[str] = []
    for device in devices or []:
        ids += [str(d) for d in (device or {}).get("device_ids") or []]
    return ids


def _resolved(value: str | None) -> str | None:
    """An env value as the container sees it with the host's defaults (`${V:-d}` -> d)."""
    if value is None:
        return None
    try:
        return interpolate(value, {})
    except InterpolationError:
        return value


def replica_findings(compose: ComposeFile, contract: FileContract, spec: ReplicaContract,
                     releases: Releases | None) -> list[Finding]:
    service = compose.services[spec.name]
    base = join_path("services", spec.name)
    findings = []
    image = str(service.get("image", ""))
    if "build" in service:
        findings.append(compose.finding(join_path(base, "build"), "engines are never built here"))
    release = releases.by_recipe(spec.recipe) if releases else None
    if releases is not None and release is None:
        findings.append(compose.finding(join_path(base, "image"), (
            f"no release record for {spec.recipe} in {releases.directory}; record one with "
            f"`bazel run {spec.recipe}.release`")))
    elif release is not None and image != release.image:
        findings.append(compose.finding(join_path(base, "image"), (
            f"image {image!r} is not {spec.recipe}'s release {release.image}")))
    findings += argv_findings(compose, join_path(base, "command"),
                              command_argv(service.get("command")), contract.argv(spec))
    env = env_map(service.get("environment"))
    want = contract.environment(spec)
    for key in sorted(set(env) | set(want)):
        where = join_path(base, "environment", key)
        if key not in env:
            findings.append(compose.finding(where, f"missing, contract requires {want[key]!r}"))
        elif key not in want:
            findings.append(compose.finding(where, f"unexpected variable (value {shown(key, env[key])})"))
        elif env[key] != want[key]:
            findings.append(compose.finding(where, (
                f"is {shown(key, env[key])}, contract requires {want[key]!r}")))
    ids = _device_ids(service)
    if ids != list(spec.device_ids):
        findings.append(compose.finding(join_path(base, "deploy.resources.reservations.devices"), (
            f"GPU device_ids {ids} but replica {spec.index} owns {list(spec.device_ids)}")))
    return findings


def split_gate_findings(compose: ComposeFile, name: str, releases: Releases | None) -> list[Finding]:
    """Evaluated on what the file actually runs, not on the contract table."""
    service = compose.services[name]
    base = join_path("services", name)
    got = dict(options(command_argv(service.get("command"))[2:]))
    env = env_map(service.get("environment"))
    split_on = _resolved(env.get(QSPLIT)) == "1"
    findings = []
    try:
        chunk = int(got.get("--chunked-prefill-size") or 0)
    except ValueError:
        chunk = 0
    if chunk >= SPLIT_REQUIRED_FROM and not split_on:
        findings.append(compose.finding(join_path(base, "environment", QSPLIT), (
            f"split gate: --chunked-prefill-size {chunk} requires {QSPLIT}=1 (without the DSA "
            "indexer query split a concurrent long-prefill burst left 0.04-0.65 GB free); set "
            f"{QSPLIT}=1 or use --chunked-prefill-size 8192")))
    if split_on:
        image = str(service.get("image", ""))
        digest = pinned_digest(image)
        record = releases.by_digest(digest) if releases and digest else None
        if record is None:
            where = releases.directory if releases else "no release records"
            findings.append(compose.finding(join_path(base, "image"), (
                f"split gate: {QSPLIT}=1 requires an image whose release carries the "
                f"dsa-indexer-qsplit patch, but {image!r} matches no release record ({where})")))
        elif not record.has_qsplit:
            findings.append(compose.finding(join_path(base, "image"), (
                f"split gate: {QSPLIT}=1 requires an image whose release carries the "
                f"dsa-indexer-qsplit patch; {record.recipe} (series {record.series}) does not "
                "(v2 and v3 do): pin a v2/v3 release or drop the split")))
    return findings


# --- whole file ---------------------------------------------------------------------------------

def forbidden_findings(compose: ComposeFile, contract: FileContract) -> list[Finding]:
    findings = []
    blocks = [(join_path("services", n), s) for n, s in compose.services.items()]
    blocks += [(str(k), v) for k, v in compose.doc.items() if str(k).startswith("x-")]
    for where, block in blocks:
        if not isinstance(block, Mapping):
            continue
        env = env_map(block.get("environment"))
        if where.startswith("x-"):
            env.update(env_map(block))  # an anchor may be an environment mapping itself
        for key in contract.forbidden_env:
            if key in env:
                findings.append(compose.finding(join_path(where, "environment", key), (
                    f"forbidden variable: {key} must not be set anywhere (admission-reserve "
                    "knobs are not rank-deterministic; MIN_WAIT_S crashed the engine)")))
    return findings


def proxy_findings(compose: ComposeFile, contract: FileContract) -> list[Finding]:
    service = compose.services.get(contract.proxy)
    if not isinstance(service, Mapping):
        return []
    base = join_path("services", contract.proxy, "environment")
    env = env_map(service.get("environment"))
    urls = ",".join(f"http://{r.name}:8000" for r in contract.replicas)
    want = f"${{{contract.backend_urls_var}:-{urls}}}"
    findings = []
    if env.get("VLLM_BACKEND_URLS") != want:
        findings.append(compose.finding(join_path(base, "VLLM_BACKEND_URLS"), (
            f"proxy backends {env.get('VLLM_BACKEND_URLS')!r} must be exactly the replicas, "
            f"host-overridable: {want!r}")))
    if env.get("VLLM_BACKEND_CONVERSATION_AFFINITY") != "1":
        findings.append(compose.finding(join_path(base, "VLLM_BACKEND_CONVERSATION_AFFINITY"), (
            "must be \"1\" (conversation affinity keeps a conversation's cache on one replica)")))
    return findings


def normalized_view(compose: ComposeFile, proxy: str,
                    overlay: LongTierOverlay | None = None) -> dict[str, Any]:
    """The file minus its engines: engine services, `x-*` anchors and engine scrape jobs gone,
    engine names as ENGINE-r<i> and the deployment label as DEPLOYMENT everywhere, embedded
    nginx and collector configs parsed (comments and layout do not count). With an overlay, the
    long-tier additions are taken out too."""
    doc = copy.deepcopy(compose.doc)
    names = engines(compose)
    doc["services"] = {k: v for k, v in doc.get("services", {}).items() if k not in names}
    # `x-*` blocks are YAML plumbing Compose ignores; the loader already merged them into the
    # services that use them, so they carry no meaning of their own.
    for key in [k for k in doc if str(k).startswith("x-")]:
        del doc[key]
    collector = collector_config(compose)
    if collector is not None:
        doc["configs"][collector[0]]["content"] = _collector_without_engines(collector[1],
                                                                             set(names))
    for item in nginx_configs(compose):
        if item.syntax_error is None:
            doc["configs"][item.config]["content"] = _nginx_tree(item.directives, overlay)
    if overlay is not None:
        _remove_overlay(doc, overlay)
    renames = {n: f"ENGINE-r{i}" for i, n in enumerate(sorted(names, key=_replica_order), start=1)}
    deployment = labels_map((compose.services.get(proxy) or {}).get("labels")).get(
        "nearai.otel.deployment")
    if deployment:
        renames[deployment] = "DEPLOYMENT"
    text = json.dumps(doc, sort_keys=True, default=str)
    for old in sorted(renames, key=len, reverse=True):
        text = re.sub(re.escape(old) + r"(?![\w-])", renames[old], text)
    return json.loads(text)


def _nginx_tree(directives: list[nginx_conf.Directive],
                overlay: LongTierOverlay | None) -> list[Any]:
    tree = []
    for d in directives:
        if overlay and d.name == "server" and any(
                l.values[:1] and l.values[0].rsplit(":", 1)[-1] == overlay.nginx_listen
                for l in d.children("listen")):
            continue
        args = d.values
        if overlay and d.name == "server_name":
            args = [a for a in args if a != overlay.server_name]
        entry: list[Any] = [d.name, *args]
        if d.block is not None:
            entry.append(_nginx_tree(d.block, overlay))
        tree.append(entry)
    return tree


def _remove_overlay(doc: dict[str, Any], overlay: LongTierOverlay) -> None:
    for service in doc.get("services", {}).values():
        if not isinstance(service, dict):
            continue
        if isinstance(service.get("ports"), list):
            service["ports"] = [p for p in service["ports"] if _mapping(p) != overlay.port_mapping]
        env = service.get("environment")
        if isinstance(env, dict):
            for key in overlay.registrar_env:
                env.pop(key, None)
        elif isinstance(env, list):
            service["environment"] = [e for e in env
                                      if str(e).partition("=")[0] not in overlay.registrar_env]


def _mapping(port: Any) -> str:
    """`published:target` of a Compose port, long form (the model) or short."""
    if isinstance(port, dict):
        return f"{port.get('published')}:{port.get('target')}"
    return str(port)


def _replica_order(name: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", name)
    return (int(m.group(1)) if m else 0, name)


def _collector_without_engines(content: str, names: set[str]) -> Any:
    try:
        config = load_yaml_text(content, "collector")
    except LoadError:
        return content
    for receiver in (config.get("receivers") or {}).values():
        jobs = ((receiver or {}).get("config") or {}).get("scrape_configs") if isinstance(
            receiver, dict) else None
        if isinstance(jobs, list):
            jobs[:] = [j for j in jobs if not _targets_engine(j, names)]
    return config


def _targets_engine(job: Any, names: set[str]) -> bool:
    for static in (job or {}).get("static_configs") or []:
        for target in (static or {}).get("targets") or []:
            if str(target).rpartition(":")[0] in names:
                return True
    return False


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Dotted path of the first place two JSON-like values differ (keys in sorted order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = join_path(path, str(key))
            if key not in a or key not in b:
                return sub
            found = first_difference(a[key], b[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, join_path(path, i))
            if found is not None:
                return found
        return None if len(a) == len(b) else join_path(path, min(len(a), len(b)))
    return None if a == b else (path or "<document>")


def _drop(view: dict[str, Any], dotted: str) -> None:
    parts = dotted.split(".")
    node: Any = view
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def derivation_findings(compose: ComposeFile, source: ComposeFile,
                        contract: FileContract) -> list[Finding]:
    mine = normalized_view(compose, contract.proxy, contract.overlay)
    theirs = normalized_view(source, contract.proxy)
    for dotted in contract.derived_differences:
        _drop(mine, dotted)
        _drop(theirs, dotted)
    path = first_difference(mine, theirs)
    if path is None:
        return []
    return [compose.finding(path, (
        f"differs from {source.label} outside the engines and the long-tier overlay (first "
        "difference; normalized: engines, x-* anchors and engine scrape jobs removed, engine "
        "names as ENGINE-r<i>, deployment label as DEPLOYMENT); "
        "change the source file or the generator, not this file"))]


# --- entry --------------------------------------------------------------------------------------

def validate(compose: ComposeFile, contract: FileContract, releases: Releases | None,
             source: ComposeFile | None) -> list[Finding]:
    findings = []
    present = list(compose.services)
    for name in contract.services:
        if name not in present:
            findings.append(compose.finding(join_path("services", name), "missing service"))
    for name in present:
        if name not in contract.services:
            findings.append(compose.finding(join_path("services", name), (
                f"unexpected service: the {contract.deployment} file runs exactly "
                f"{', '.join(contract.services)}")))
    for spec in contract.replicas:
        if isinstance(compose.services.get(spec.name), Mapping):
            findings += replica_findings(compose, contract, spec, releases)
    for name in engines(compose):
        findings += split_gate_findings(compose, name, releases)
    findings += forbidden_findings(compose, contract)
    findings += proxy_findings(compose, contract)
    if source is not None:
        findings += derivation_findings(compose, source, contract)
    return findings


def _releases(args: argparse.Namespace) -> Releases | None:
    if args.release:
        paths = [cli.user_path(p) for p in args.release]
        return load_files(paths, paths[0].parent)
    if args.releases_dir:
        return load_dir(cli.user_path(args.releases_dir))
    # `bazel run` from a checkout: the committed records, when the repository has them.
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if workspace and (Path(workspace) / "recipes" / "releases").is_dir():
        return load_dir(Path(workspace) / "recipes" / "releases")
    return None


def check(compose: ComposeFile, args: argparse.Namespace) -> list[Finding]:
    try:
        releases = _releases(args)
    except ReleaseError as exc:
        return [compose.finding("", f"release records: {exc}")]
    source = None
    if args.source:
        try:
            source = cli.load(args.source, args.compose_bin)
        except LoadError as exc:
            return [compose.finding("", f"source file: {exc}")]
    name = deployment_of(compose)
    contract = CONTRACTS.get(name or "")
    if contract is None:
        return [compose.finding("", (
            f"no production contract binds deployment {name!r} (the nearai.otel.deployment "
            f"label); contracts: {', '.join(sorted(CONTRACTS))}; state one in "
            "deploy/validators/glm53_contract.py"))]
    return validate(compose, contract, releases, source)


def deployment_of(compose: ComposeFile) -> str | None:
    """The file's `nearai.otel.deployment` label (every generated service carries it)."""
    for service in compose.services.values():
        if isinstance(service, Mapping):
            name = labels_map(service.get("labels")).get("nearai.otel.deployment")
            if name:
                return name
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--releases-dir", help="directory of release records (default under `bazel "
                   "run`: the checkout's recipes/releases); decides which image digests carry "
                   "the split patch and which release each replica must pin")
    p.add_argument("--release", action="append", default=[], metavar="RECORD_JSON",
                   help="a release record file (repeatable; instead of --releases-dir)")
    p.add_argument("--source", help="the compose file this one derives from (whole-file rule)")


def main(argv: list[str] | None = None) -> int:
    return cli.main(VALIDATOR, __doc__.splitlines()[0], check, add_arguments, argv)


if __name__ == "__main__":
    sys.exit(main())
