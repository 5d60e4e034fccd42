"""Runtime rules on Compose's canonical model, independent of the generator.

Each rule reads the model the pinned Compose binary resolves (deploy/validators/model.py) and the
tier's table (deploy/validators/tier.py), never the generator's tables, so an edit of the generator
itself fails here. Every message starts with the rule's name; the path is the model's dotted path.

  host-port-unique     no host port (ip/port/protocol) published twice, profiles included
  gpu-inventory        every GPU id exists on the host (H200: 0-7); engines' GPU sets disjoint
  engine-runtime       ipc, ulimits, runtime, init, restart, grace period, volumes: equal
                       across replicas and equal to the tier's table
  engine-no-host-port  engines publish no host port (traffic goes through the inference proxy)
  public-metrics       a real nginx proxies no /metrics or /v1/metrics path (by prefix:
                       /metrics/, /metrics/x, /metricsz, ...) on any public listener
  public-routes        public nginx listeners (published ports of an nginx started by default)
                       route only to inference proxies; any nginx upstream must be a service
  engine-healthcheck   every engine checks `/health` of its own port with a timeout under the
                       proxy's, retries = the proxy's missed probes, interval x retries within
                       the tier's detection bound, start_period covering the cold start
  healthcheck-bounds   no healthcheck waits longer than the tier allows (interval, timeout)
  healthcheck-can-fail no healthcheck test forces success (`|| true`, `exit 0`, NONE, a Python
                       handler that swallows the failure)
  sidecar-memory       every service that is not an engine has the memory limit of its tier row
  engine-identity      engine_image = the digest's first 12 hex; config_variant's c<chunk>,
                       qsplit, pdi<n> match the argv/env and the offload marker matches the
                       release record (patches of the marker's series)
  secret-by-value      detect-secrets finds no credential in any string; credential-named
                       variables are `${VAR}` references (location reported, never the value)

and the request-path rules of deploy/validators/request_path.py (upstream-port, registrar-ports,
mounted-files, sidecar-class, model-revision, gpu-monitor), the per-class allow tables
(service_keys.py: service-keys, service-mounts, log-rotation, collector-exposure), start order
(start_order.py), engine-shm and engine-parallelism (engine_resources.py), nginx-log-privacy
and engine-log-privacy (log_privacy.py) and dcgm-fields (dcgm_fields.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tools.oci.reference import pinned_digest
from deploy.validators import (cli, dcgm_fields, engine_resources, log_privacy, nginx_conf, nginx_probe,
                               request_path, secrets, service_keys, start_order, topology)
from deploy.validators.compose_doc import Finding, command_argv, join_path
from deploy.validators.model import Model, default_compose_bin, load_model
from deploy.releases import ReleaseError, ReleaseRecord, Releases, load_dir
from deploy.validators.tier import TIERS, HealthPolicy, Tier
from deploy.validators.topology import (device_ids, engine_port, inference_proxies, is_nginx_service,
                                        listen_ports, location_of, nginx_configs, proxy_routes,
                                        published_ports, upstream_hosts)

VALIDATOR = "runtime"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def seconds(value: Any) -> float | None:
    """A Compose/Go duration (`5m0s`, `1h`, `2s`) in seconds; None when unset or unreadable."""
    if value is None:
        return None
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def engines(model: Model) -> list[str]:
    return topology.engines(model.as_compose_file())


@dataclass(frozen=True)
class Context:
    tier: Tier
    releases: Releases | None
    series_dir: Path | None
    nginx_bin: str = ""  # empty: the public-metrics rule cannot run and says so
    openssl_bin: str = "/usr/bin/openssl"


Rule = Callable[[Model, Context], list[Finding]]


# --- host ports -----------------------------------------------------------------------------

def host_port_findings(model: Model, ctx: Context) -> list[Finding]:
    seen: dict[tuple[str, int, str], str] = {}
    findings = []
    for name, service in sorted(model.services.items()):
        for i, port in enumerate(service.get("ports") or []):
            where = join_path("services", name, "ports", i)
            for number in published_ports(port):
                key = (port.get("host_ip") or "0.0.0.0", number, port.get("protocol") or "tcp")
                if key in seen:
                    findings.append(model.finding(where, (
                        f"host-port-unique: host port {number}/{key[2]} is already published by "
                        f"{seen[key]}; two services cannot bind one host port (pick a free port)")))
                else:
                    seen[key] = where
    return findings


# --- GPUs -----------------------------------------------------------------------------------

def gpu_findings(model: Model, ctx: Context) -> list[Finding]:
    inventory = ctx.tier.inventory
    findings = []
    owner: dict[str, str] = {}
    engine_names = set(engines(model))
    for name, service in sorted(model.services.items()):
        where = join_path("services", name, "deploy.resources.reservations.devices")
        ids = device_ids(service)
        for gpu in ids:
            if gpu not in inventory.ids():
                findings.append(model.finding(where, (
                    f"gpu-inventory: GPU id {gpu!r} does not exist on an {inventory.model} host "
                    f"(ids 0-{inventory.gpus - 1})")))
        if name not in engine_names:
            continue  # monitors (DCGM) read every GPU; only engines own them
        for gpu in ids:
            if gpu in owner:
                findings.append(model.finding(where, (
                    f"gpu-inventory: GPU {gpu} is already reserved by engine {owner[gpu]}; "
                    "engine GPU sets must be disjoint")))
            else:
                owner[gpu] = name
    return findings


# --- engine runtime parity ------------------------------------------------------------------

# shm_size (and any other /dev/shm mount) is engine-shm's (engine_resources.py).
RUNTIME_KEYS = ("ipc", "runtime", "init", "restart", "stop_grace_period", "ulimits", "volumes")


def _runtime_view(service: Mapping[str, Any]) -> dict[str, Any]:
    view = {k: service.get(k) for k in RUNTIME_KEYS}
    view["stop_grace_period"] = seconds(service.get("stop_grace_period"))
    view["volumes"] = sorted((str(v.get("source")), str(v.get("target")))
                             for v in service.get("volumes") or [] if isinstance(v, Mapping))
    return view


def _table_view(tier: Tier) -> dict[str, Any]:
    e = tier.engine
    return {"ipc": e.ipc, "runtime": e.runtime, "init": e.init, "restart": e.restart,
            "stop_grace_period": e.stop_grace_period_s,
            "ulimits": json.loads(json.dumps(dict(e.ulimits))),
            "volumes": sorted(e.volumes)}


def _render(key: str, value: Any) -> str:
    if key == "stop_grace_period" and value is not None:
        return f"{value:g}s"
    if key == "volumes":
        return "[" + ", ".join(f"{s}:{t}" for s, t in value) + "]"
    return "unset" if value is None else json.dumps(value)


def engine_runtime_findings(model: Model, ctx: Context) -> list[Finding]:
    names = sorted(engines(model))
    want = _table_view(ctx.tier)
    findings = []
    first = _runtime_view(model.services[names[0]]) if names else {}
    for name in names:
        view = _runtime_view(model.services[name])
        for key in RUNTIME_KEYS:
            where = join_path("services", name, key)
            if name != names[0] and view[key] != first[key]:
                findings.append(model.finding(where, (
                    f"engine-runtime: replicas differ: {_render(key, view[key])} here, "
                    f"{_render(key, first[key])} on {names[0]}")))
            if view[key] != want[key]:
                findings.append(model.finding(where, (
                    f"engine-runtime: is {_render(key, view[key])}, the {ctx.tier.name} tier "
                    f"table requires {_render(key, want[key])}")))
    return findings


def engine_port_findings(model: Model, ctx: Context) -> list[Finding]:
    findings = []
    for name in engines(model):
        for i, port in enumerate(model.services[name].get("ports") or []):
            if published_ports(port):
                findings.append(model.finding(join_path("services", name, "ports", i), (
                    f"engine-no-host-port: engine publishes host port {port.get('published')} -> "
                    f"{port.get('target')}, bypassing the inference proxy; remove the mapping")))
    return findings


# --- nginx routes ---------------------------------------------------------------------------

def public_route_findings(model: Model, ctx: Context) -> list[Finding]:
    compose = model.as_compose_file()
    proxies = set(inference_proxies(compose))
    known = set(model.services)
    findings = []
    for item in nginx_configs(compose):
        if item.syntax_error is not None:
            continue  # the nginx validator reports it
        upstreams = upstream_hosts(item.directives)
        for server in nginx_conf.servers(item.directives):
            public = sorted(_public_ports(model, item.services, server))
            for directive, host in proxy_routes(server, item.directives, upstreams):
                where = f"line {directive.line} ({location_of(directive)})"
                if host not in known:
                    findings.append(model.finding(item.where, (
                        f"public-routes: {where} proxies to {host!r}, which is not a service "
                        "of this file (misspelled upstream?)")))
                elif public and host not in proxies:
                    findings.append(model.finding(item.where, (
                        f"public-routes: {where} on public listener port {public[0]} proxies to "
                        f"{host}, not an inference proxy; public listeners route only to "
                        f"{', '.join(sorted(proxies)) or 'inference proxies'}")))
    return findings


def _public_ports(model: Model, services: list[str], server: nginx_conf.Directive) -> set[int]:
    """Listen ports of `server` that a default-started nginx service publishes on the host.
    Profile-gated services (operator tools such as the soak relay) are not public."""
    ports: set[int] = set()
    for name in services:
        service = model.services.get(name) or {}
        if service.get("profiles") or not is_nginx_service(service):
            continue
        targets = {int(p.get("target")) for p in service.get("ports") or [] if published_ports(p)}
        ports |= set(listen_ports(server)) & targets
    return ports


# --- health and limits ----------------------------------------------------------------------

def healthcheck_findings(model: Model, ctx: Context) -> list[Finding]:
    health = ctx.tier.health
    findings = []
    for name in engines(model):
        service = model.services[name]
        where = join_path("services", name, "healthcheck")
        check = service.get("healthcheck")
        if not check or check.get("disable"):
            findings.append(model.finding(where, (
                f"engine-healthcheck: engine has no healthcheck; probe "
                f"http://127.0.0.1:{engine_port(service)}{health.engine_path} with a timeout "
                f"under {health.proxy_timeout_s:g}s")))
            continue
        test = " ".join(str(t) for t in check.get("test") or [])
        path = re.escape(health.engine_path)
        if not re.search(rf"//(127\.0\.0\.1|localhost):{engine_port(service)}{path}(?![\w/])",
                         test):
            findings.append(model.finding(join_path(where, "test"), (
                f"engine-healthcheck: the test does not request "
                f"http://127.0.0.1:{engine_port(service)}{health.engine_path}")))
        timeout = seconds(check.get("timeout"))
        if timeout is None or timeout >= health.proxy_timeout_s:
            findings.append(model.finding(join_path(where, "timeout"), (
                f"engine-healthcheck: timeout {check.get('timeout') or 'unset (30s)'} must be under "
                f"the inference proxy's {health.proxy_timeout_s:g}s health-probe timeout")))
        for key in ("interval", "retries", "start_period"):
            if check.get(key) in (None, 0, ""):
                findings.append(model.finding(join_path(where, key), (
                    f"engine-healthcheck: set {key} (Compose's default does not fit an engine "
                    "that loads for minutes)")))
        findings += _engine_timing(model, where, check, health)
    for name, service in sorted(model.services.items()):
        check = service.get("healthcheck") or {}
        if not check or check.get("disable"):
            continue
        reason = cannot_fail(check.get("test"))
        if reason:
            findings.append(model.finding(join_path("services", name, "healthcheck", "test"), (
                f"healthcheck-can-fail: the test {reason}, so the service is healthy whatever "
                "happens; let the probe's failure be the test's exit status")))
        for key, limit in (("interval", health.max_interval_s), ("timeout", health.max_timeout_s)):
            value = seconds(check.get(key))
            if value is not None and value > limit:
                findings.append(model.finding(join_path("services", name, "healthcheck", key), (
                    f"healthcheck-bounds: {key} {check.get(key)} exceeds the tier's {limit:g}s; "
                    "a failure would go unnoticed that long")))
    return findings


def _engine_timing(model: Model, where: str, check: Mapping[str, Any],
                   health: HealthPolicy) -> list[Finding]:
    """Timings against the proxy's probe policy and the documented cold start."""
    findings = []
    retries = check.get("retries")
    if retries not in (None, 0) and retries != health.proxy_missed_probes:
        findings.append(model.finding(join_path(where, "retries"), (
            f"engine-healthcheck: retries {retries}, the inference proxy drops a replica after "
            f"{health.proxy_missed_probes} missed {health.proxy_timeout_s:g}s probes; use "
            f"{health.proxy_missed_probes} so Docker and the proxy agree on a dead replica")))
    interval = seconds(check.get("interval"))
    if interval is not None and isinstance(retries, int) and interval * retries > \
            health.engine_max_detect_s:
        findings.append(model.finding(join_path(where, "interval"), (
            f"engine-healthcheck: interval {check.get('interval')} x retries {retries} = "
            f"{interval * retries:g}s before Docker calls a dead engine unhealthy, over the "
            f"tier's {health.engine_max_detect_s:g}s (the proxy has dropped it long before)")))
    start = seconds(check.get("start_period"))
    if start is not None and start < health.engine_cold_start_s:
        findings.append(model.finding(join_path(where, "start_period"), (
            f"engine-healthcheck: start_period {check.get('start_period')} is shorter than the "
            f"documented cold start ({health.engine_cold_start_s / 60:g} min); a loading "
            "replica would be called unhealthy (and restarted by a health-driven manager)")))
    return findings


# A test whose status is forced to 0: `|| true`, `|| :`, `; exit 0`, a Python handler that
# swallows the failure. NONE disables the check altogether.
_FORCED_OK = re.compile(r"(\|\||;|&&|^)\s*(true|:|exit(\s+0)?)\s*($|[;&|)])")
_SWALLOWED = re.compile(r"\bexcept\b|\bexit\(0\)|sys\.exit\(\s*0?\s*\)|or\s+True\b")


def cannot_fail(test: Any) -> str:
    """Why a healthcheck test cannot fail, or "" when it can."""
    argv = [str(t) for t in test] if isinstance(test, list) else [str(test or "")]
    if not argv or argv[0] == "NONE":
        return "is NONE (disabled)"
    text = " ".join(argv[1:] if argv[0] in ("CMD", "CMD-SHELL") else argv)
    if _FORCED_OK.search(text):
        return f"forces success ({_FORCED_OK.search(text).group(0).strip()!r})"
    if _SWALLOWED.search(text):
        return f"swallows the probe's failure ({_SWALLOWED.search(text).group(0)!r})"
    return ""


_BYTES = re.compile(r"^(\d+)([bkmg]?)$")


def memory_bytes(value: Any) -> int | None:
    """`1g`, `512m`, `1073741824` (Compose prints bytes) as bytes; None when unreadable."""
    match = _BYTES.match(str(value).strip().lower())
    if not match:
        return None
    return int(match.group(1)) * 1024 ** " kmg".index(match.group(2) or " ")


def memory_findings(model: Model, ctx: Context) -> list[Finding]:
    findings = []
    engine_names = set(engines(model))
    for name, service in sorted(model.services.items()):
        if name in engine_names:
            continue
        limit = service.get("mem_limit") or (((service.get("deploy") or {}).get("resources") or {})
                                             .get("limits") or {}).get("memory")
        where = join_path("services", name, "mem_limit")
        if not limit:
            findings.append(model.finding(where, (
                "sidecar-memory: sidecar has no memory limit; a leak would take the engines' "
                "host RAM (set mem_limit)")))
            continue
        row = ctx.tier.sidecar_class(name)
        if row is not None and memory_bytes(limit) != memory_bytes(row.memory):
            findings.append(model.finding(where, (
                f"sidecar-memory: is {limit} bytes, the {ctx.tier.name} tier's {row.name} row "
                f"requires {row.memory}")))
    return findings


# --- engine identity ------------------------------------------------------------------------

def series_patches(series_dir: Path, series: str) -> tuple[str, ...]:
    """Patch names a series declares itself (not the ones it extends)."""
    path = series_dir / series / "series.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path}: unreadable series declaration: {exc}") from None
    return tuple(Path(str(p["file"])).stem for p in data.get("patches") or [])


def _option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def identity_findings(model: Model, ctx: Context) -> list[Finding]:
    findings = []
    marker = ctx.tier.offload
    offload: tuple[str, ...] | None = None
    for name in sorted(engines(model)):
        service = model.services[name]
        labels = service.get("labels") or {}
        base = join_path("services", name, "labels")
        digest = pinned_digest(service.get("image"))
        release: ReleaseRecord | None = ctx.releases.by_digest(digest) if ctx.releases and digest else None
        if release is None:
            findings.append(model.finding(join_path("services", name, "image"), (
                "engine-identity: the image matches no release record"
                + (f" in {ctx.releases.directory}" if ctx.releases else " (no records given)")
                + "; pin an image a recipe's release recorded")))
            continue
        want_image = release.digest.split(":", 1)[1][:12]
        key = "nearai.otel.engine_image"
        if labels.get(key) != want_image:
            findings.append(model.finding(join_path(base, key), (
                f"engine-identity: engine_image {labels.get(key)!r} is not the first 12 hex of "
                f"the image digest ({want_image})")))
        key = "nearai.otel.config_variant"
        variant = str(labels.get(key) or "")
        parts = variant.split("-")
        argv = command_argv(service.get("command"))
        env = service.get("environment") or {}
        checks = [
            (f"c{_option(argv, '--chunked-prefill-size')}", True, "--chunked-prefill-size"),
            (f"pdi{_option(argv, '--prefill-decode-interval')}", True, "--prefill-decode-interval"),
            ("qsplit", env.get("SGLANG_DSA_INDEXER_QSPLIT") == "1", "SGLANG_DSA_INDEXER_QSPLIT=1"),
        ]
        for part, required, source in checks:
            if (part in parts) != required:
                findings.append(model.finding(join_path(base, key), (
                    f"engine-identity: config_variant {'lacks' if required else 'has'} "
                    f"`{part}-` but the service {'runs' if required else 'does not run'} {source}")))
        if ctx.series_dir is None:
            findings.append(model.finding(join_path(base, key), (
                "engine-identity: no patch series directory given (--series-dir) to decide the "
                f"{marker.marker} marker")))
            continue
        if offload is None:
            try:
                offload = series_patches(ctx.series_dir, marker.series)
            except ReleaseError as exc:
                return findings + [model.finding("", f"engine-identity: {exc}")]
        carries = bool(offload) and set(offload) <= release.patch_names
        has = f"-{marker.marker}-" in f"-{variant}-"
        if has != carries:
            findings.append(model.finding(join_path(base, key), (
                f"engine-identity: config_variant {'has' if has else 'lacks'} `{marker.marker}-` "
                f"but the image's release {release.recipe} (series {release.series}) "
                f"{'does not carry' if has else 'carries'} series {marker.series}'s patches "
                f"({', '.join(offload)})")))
    return findings


# --- secrets --------------------------------------------------------------------------------

def secret_findings(model: Model, ctx: Context) -> list[Finding]:
    findings = []
    kinds: dict[str, list[str]] = {}
    for hit in secrets.scan(model.raw):
        kinds.setdefault(hit.path, []).append(hit.kind)
    for path, found in sorted(kinds.items()):
        findings.append(model.finding(path, (
            f"secret-by-value: looks like a credential ({', '.join(found)}; value not shown); "
            "take it from the host's environment as ${VAR:?message}")))
    named = secrets.named_literals(model.raw)
    for path in named:
        if path not in kinds:
            findings.append(model.finding(path, (
                "secret-by-value: a credential-named variable holds a literal (value not shown); "
                "take it from the host's environment as ${VAR:?message}")))
    for path in secrets.fallback_paths(model.raw):
        if path not in kinds and path not in named:
            findings.append(model.finding(path, (
                "secret-by-value: a credential-named host variable falls back to a literal "
                "(`${VAR:-literal}`, value not shown): a host without it runs with that secret; "
                "use ${VAR:?message}, or ${VAR:-} where it is optional")))
    return findings


def public_metrics_findings(model: Model, ctx: Context) -> list[Finding]:
    if not ctx.nginx_bin:
        return [model.finding("", "public-metrics: no nginx binary (--nginx-bin) to probe the "
                              "public listeners with")]
    return nginx_probe.probe_findings(model, ctx.nginx_bin, ctx.openssl_bin)


def _on_tier(rule: Callable[[Model, Tier], list[Finding]]) -> Rule:
    return lambda model, ctx: rule(model, ctx.tier)


RULES: tuple[Rule, ...] = (
    host_port_findings, gpu_findings, engine_runtime_findings, engine_port_findings,
    public_route_findings, public_metrics_findings, healthcheck_findings, memory_findings,
    identity_findings, secret_findings,
    *map(_on_tier, request_path.RULES + service_keys.RULES + start_order.RULES
         + engine_resources.RULES + log_privacy.RULES + dcgm_fields.RULES),
)


def validate(model: Model, ctx: Context) -> list[Finding]:
    return [f for rule in RULES for f in rule(model, ctx)]


# --- CLI ------------------------------------------------------------------------------------

def _workspace_dir(sub: str) -> str:
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    return str(Path(workspace) / sub) if workspace and (Path(workspace) / sub).is_dir() else ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compose-bin", default=default_compose_bin(),
                   help="the pinned Docker Compose v2 binary that resolves the model")
    p.add_argument("--tier", default="glm53-h200", choices=sorted(TIERS),
                   help="the tier table the engines must match (default: %(default)s)")
    p.add_argument("--releases-dir", default=os.environ.get("RELEASES_DIR") or _workspace_dir(
        "recipes/releases"), help="release records (default under `bazel run`: recipes/releases)")
    p.add_argument("--nginx-bin", default=os.environ.get("NGINX_BIN", shutil.which(
        "nginx", path="/usr/sbin:/usr/bin") or ""), help="nginx for the public-metrics probe "
        "(default: Debian's /usr/sbin/nginx)")
    p.add_argument("--openssl-bin", default=shutil.which("openssl") or "/usr/bin/openssl",
                   help="openssl, for the probe's throwaway certificate")
    p.add_argument("--series-dir", default=os.environ.get("SERIES_DIR") or _workspace_dir(
        "patches"), help="patch series declarations <dir>/<series>/series.json (default under "
        "`bazel run`: patches)")


def context(args: argparse.Namespace) -> Context:
    releases = load_dir(cli.user_path(args.releases_dir)) if args.releases_dir else None
    series_dir = cli.user_path(args.series_dir) if args.series_dir else None
    return Context(TIERS[args.tier], releases, series_dir, args.nginx_bin, args.openssl_bin)


def run(args: argparse.Namespace) -> int:
    if not args.compose_bin:
        print(f"{VALIDATOR}: --compose-bin (or COMPOSE_BIN) is required", file=sys.stderr)
        return 2
    compose_bin = cli.tool_path(args.compose_bin)
    try:
        ctx = context(args)
    except ReleaseError as exc:
        print(f"{VALIDATOR}: {exc}", file=sys.stderr)
        return 2
    return cli.run(VALIDATOR, args, lambda model, _args: validate(model, ctx), compose_bin,
                   loader=lambda raw, binary: load_model(cli.user_path(raw), raw, binary))


def main(argv: list[str] | None = None) -> int:
    p = cli.parser(VALIDATOR, __doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
