"""Request-path rules around the engines, on Compose's canonical model.

nginx -> inference proxy -> engines, the registrar that announces the host, the downloader that
fetches what the engines load, the sidecars' runtime and the GPU monitor. Expected values come
from the tier table (deploy/validators/tier.py: one row per sidecar class) and the pin table
(pins/repository_locations.bzl), never from the generator, so a generator edit that every file
shares fails here. Run as part of the runtime validator (deploy/validators/runtime.py RULES).

  upstream-port     every nginx upstream and every inference-proxy backend is host:port of a
                    service that listens on that port (engine: its --port; nginx: its configs'
                    `listen`; a sidecar: its tier row); every engine is some proxy's backend
  registrar-ports   each port the registrar announces is a host port a default-started nginx
                    publishes onto a listener of the right kind (TLS or plain)
  mounted-files     every file a service reads (nginx ssl_* files, absolute paths in its argv,
                    `*_PATH`/`*_FILE` env values, the collector's log and storage paths) lies
                    under a volume, bind, config, secret or tmpfs mounted into that service
  sidecar-class     every service that is not an engine has a tier row; its image is the row's
                    pin; restart, healthcheck, user, privileged (with the row's reason),
                    capabilities, read-only root and security options are the row's; the row's
                    optional variables are `${VAR:-…}` (memory: `sidecar-memory`, runtime.py)
  model-revision    the downloader fetches each Hub repository/file at the pin table's revision
                    (and checks the pinned sha256); engines load --model-path at the pinned
                    --revision, which the downloader fetched; the chat template's snapshot
                    directory is the template pin's revision
  gpu-monitor       a monitor row (DCGM) reserves every GPU an engine reserves
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from pins import table as pin_table
from pins import uses
from tools.oci.reference import ReferenceError, parse_reference
from deploy.validators import nginx_conf, topology
from deploy.validators.compose_doc import (Finding, LoadError, command_argv, config_contents, env_map,
                                           join_path, load_yaml_text)
from deploy.validators.model import Model
from deploy.validators.secrets import shown
from deploy.validators.tier import SidecarClass, Tier
from deploy.validators.topology import (device_ids, engine_port, is_nginx_service, nginx_configs,
                                        published_ports)


def _engine_names(model: Model) -> list[str]:
    return topology.engines(model.as_compose_file())


def listening_ports(model: Model, tier: Tier) -> dict[str, set[int]]:
    """Ports each service serves on, for the services whose ports are known."""
    ports: dict[str, set[int]] = {}
    for name in _engine_names(model):
        ports[name] = {engine_port(model.services[name])}
    for item in nginx_configs(model.as_compose_file()):
        for name in item.services:
            ports.setdefault(name, set()).update(
                p for server in nginx_conf.servers(item.directives)
                for p in topology.listen_ports(server))
    for name in model.services:
        row = tier.sidecar_class(name)
        if row is not None and row.listens:
            ports.setdefault(name, set()).update(row.listens)
    return ports


def _ports_text(ports: set[int]) -> str:
    return ", ".join(str(p) for p in sorted(ports)) or "no port"


# --- upstream-port --------------------------------------------------------------------------

BACKENDS_ENV = "VLLM_BACKEND_URLS"


def upstream_findings(model: Model, tier: Tier) -> list[Finding]:
    listening = listening_ports(model, tier)
    compose = model.as_compose_file()
    findings = []
    for item in nginx_configs(compose):
        if item.syntax_error is not None:
            continue  # the nginx validator reports it
        upstreams = topology.upstream_hosts(item.directives)
        for server in nginx_conf.servers(item.directives):
            for directive, host, port in topology.proxy_endpoints(server, item.directives,
                                                                  upstreams):
                known = listening.get(host)
                if known is None or port in known:
                    continue  # an unknown host is public-routes' finding
                findings.append(model.finding(item.where, (
                    f"upstream-port: line {directive.line} ({topology.location_of(directive)}) "
                    f"proxies to {host}:{port}, but {host} listens on {_ports_text(known)}")))
    engine_names = _engine_names(model)
    backed: set[str] = set()
    for proxy in topology.inference_proxies(compose):
        raw = env_map(model.services[proxy].get("environment")).get(BACKENDS_ENV)
        if raw is None:
            continue
        where = join_path("services", proxy, "environment", BACKENDS_ENV)
        for url in [u.strip() for u in raw.split(",") if u.strip()]:
            host, port = topology.url_endpoint(url)
            backed.add(host)
            if host not in engine_names:
                findings.append(model.finding(where, (
                    f"upstream-port: backend {url} is not an engine of this file (engines: "
                    f"{', '.join(engine_names) or 'none'})")))
            elif port not in listening[host]:
                findings.append(model.finding(where, (
                    f"upstream-port: backend {url} uses port {port}, but {host} listens on "
                    f"{_ports_text(listening[host])} (its --port)")))
    if topology.inference_proxies(compose):
        for name in engine_names:
            if name not in backed:
                findings.append(model.finding(join_path("services", name), (
                    f"upstream-port: engine is in no inference proxy's {BACKENDS_ENV}; it "
                    "would never get traffic")))
    return findings


# --- registrar-ports ------------------------------------------------------------------------

def _nginx_listeners(model: Model, service: str) -> dict[int, bool]:
    """Listen port -> whether it terminates TLS, over the configs mounted into `service`."""
    found: dict[int, bool] = {}
    for item in nginx_configs(model.as_compose_file()):
        if service not in item.services:
            continue
        for server in nginx_conf.servers(item.directives):
            for listen in server.children("listen"):
                port = topology.listen_port(listen)
                if port is not None:
                    found[port] = found.get(port, False) or "ssl" in listen.values[1:]
    return found


def registrar_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    for name, service in sorted(model.services.items()):
        row = tier.sidecar_class(name)
        if row is None or not row.announces:
            continue
        env = env_map(service.get("environment"))
        published: dict[int, tuple[str, int]] = {}
        for nginx, other in sorted(model.services.items()):
            if other.get("profiles") or not is_nginx_service(other):
                continue  # a profile-gated nginx (the soak relay) is not started with the host
            for port in other.get("ports") or []:
                for number in published_ports(port):
                    published[number] = (nginx, int(port.get("target")))
        for announced in row.announces:
            value = env.get(announced.variable)
            if value is None:
                continue
            where = join_path("services", name, "environment", announced.variable)
            kind = "TLS" if announced.tls else "plain HTTP"
            if not value.isdigit():
                findings.append(model.finding(where, (
                    f"registrar-ports: {announced.variable}={value!r} is not a port number")))
                continue
            if int(value) not in published:
                findings.append(model.finding(where, (
                    f"registrar-ports: {announced.variable}={value} is announced to the "
                    f"model-proxy peers, but no default-started nginx publishes host port "
                    f"{value} (published: {_ports_text(set(published))}); the host would get "
                    "no traffic")))
                continue
            nginx, target = published[int(value)]
            listeners = _nginx_listeners(model, nginx)
            if target not in listeners:
                findings.append(model.finding(where, (
                    f"registrar-ports: {announced.variable}={value} is published onto "
                    f"{nginx}:{target}, where no server block listens")))
            elif listeners[target] != announced.tls:
                findings.append(model.finding(where, (
                    f"registrar-ports: {announced.variable}={value} must reach a {kind} "
                    f"listener, but {nginx}:{target} is "
                    f"{'TLS' if listeners[target] else 'plain HTTP'}")))
    return findings


# --- mounted-files --------------------------------------------------------------------------

NGINX_FILE_DIRECTIVES = ("ssl_certificate", "ssl_certificate_key", "ssl_trusted_certificate",
                         "ssl_client_certificate", "ssl_dhparam", "ssl_password_file",
                         "auth_basic_user_file")
FILE_ENV = re.compile(r"_(PATH|FILE)$")


def _mount_targets(service: Mapping[str, Any]) -> list[str]:
    targets = [str(v.get("target")) for v in service.get("volumes") or []
               if isinstance(v, Mapping) and v.get("target")]
    for key in ("configs", "secrets"):
        for item in service.get(key) or []:
            if isinstance(item, Mapping) and item.get("source"):
                default = f"/run/secrets/{item['source']}" if key == "secrets" else f"/{item['source']}"
                targets.append(str(item.get("target") or default))
    tmpfs = service.get("tmpfs") or []
    targets += [str(t).split(":", 1)[0] for t in ([tmpfs] if isinstance(tmpfs, str) else tmpfs)]
    return [t.rstrip("/") or "/" for t in targets]


def _is_mounted(path: str, targets: list[str]) -> bool:
    path = path.split("*", 1)[0].rstrip("/") or "/"  # a glob: its fixed leading directories
    return any(path == t or path.startswith(t + "/") or t == "/" for t in targets)


def _argv_reads(service: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, where) for absolute paths a service's argv names. A shell `-c` script is not
    parsed (its reads are the script's business); the program itself comes from the image."""
    entrypoint = command_argv(service.get("entrypoint"))
    if "-c" in entrypoint:
        return
    command = command_argv(service.get("command"))
    argv = entrypoint + command
    for i, token in enumerate(argv):
        if i == 0 and not token.startswith("-"):
            continue
        value = token.split("=", 1)[1] if token.startswith("-") and "=" in token else token
        if value.startswith("/") and " " not in value:
            index = i - len(entrypoint)
            yield value, (join_path("command", index) if index >= 0
                          else join_path("entrypoint", i))


def _collector_reads(model: Model, service: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Paths an OpenTelemetry collector config reads or writes: filelog `include` globs and
    file_storage directories."""
    contents = config_contents(model.as_compose_file())
    for item in service.get("configs") or []:
        source = (item or {}).get("source") if isinstance(item, Mapping) else item
        if source not in contents or "opentelemetry-collector" not in str(service.get("image")):
            continue
        try:
            # The validators' one parse (compose_doc): once per text in a `check` run.
            config = load_yaml_text(contents[source].replace("$$", "$"), source)
        except LoadError:
            continue  # the telemetry validator reports it
        where = join_path("configs", source, "content")
        for kind, section in (("receivers", "include"), ("extensions", "directory")):
            for component, body in ((config or {}).get(kind) or {}).items():
                values = (body or {}).get(section) if isinstance(body, Mapping) else None
                for value in [values] if isinstance(values, str) else values or []:
                    yield str(value), f"{where} {kind}.{component}.{section}"


def mount_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    items = nginx_configs(model.as_compose_file())
    for name, service in sorted(model.services.items()):
        reads: list[tuple[str, str]] = []
        for item in items:
            if name not in item.services or item.syntax_error is not None:
                continue
            for d in nginx_conf.walk(item.directives):
                if d.name in NGINX_FILE_DIRECTIVES and d.args and "$" not in d.args[0].text:
                    reads.append((d.args[0].text, f"{item.where} line {d.line} {d.name}"))
        reads += [(p, join_path("services", name, w)) for p, w in _argv_reads(service)]
        for key, value in env_map(service.get("environment")).items():
            if FILE_ENV.search(key) and value and value.startswith("/"):
                reads.append((value, join_path("services", name, "environment", key)))
        reads += list(_collector_reads(model, service))
        targets = _mount_targets(service)
        for path, where in dict.fromkeys(reads):
            if not _is_mounted(path, targets):
                findings.append(model.finding(join_path("services", name), (
                    f"mounted-files: reads {path} ({where}), but no volume, bind, config, "
                    f"secret or tmpfs is mounted there (mounted: {', '.join(targets) or 'none'}); "
                    "the container would not find it")))
    return findings


# --- sidecar-class --------------------------------------------------------------------------

OPTIONAL = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:?-[^}]*\}$")


def _set(value: Any) -> tuple[str, ...]:
    return tuple(sorted(str(v) for v in value or []))


def _show(value: Any) -> str:
    if value in (None, (), False, ""):
        return "unset" if value in (None, (), "") else "false"
    if value is True:
        return "true"
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    return repr(value)


def _image_finding(name: str, image: str, row: SidecarClass,
                   pins: pin_table.PinTable) -> str | None:
    pin = pins.pins.get(row.pin)
    if pin is None or pin.kind != "image":
        return f"the tier row {row.name} names pin {row.pin!r}, which is no image row of {pins.path}"
    try:
        ref = parse_reference(image, join_path("services", name, "image"),
                              unresolved=pins.unresolved)
    except ReferenceError as err:
        return str(err)
    digest = pins.unresolved if ref.unresolved else ref.digest
    if str(ref.repository) != pin.repository or digest != pin.digest:
        return (f"image is {image}, the {row.name} row's pin {row.pin} is {pin.image} (a moved "
                "tag or a lost digest changes what runs)")
    return None


def sidecar_findings(model: Model, tier: Tier) -> list[Finding]:
    pins = pin_table.load()
    engine_names = set(_engine_names(model))
    findings = []
    for name, service in sorted(model.services.items()):
        if name in engine_names:
            continue
        base = join_path("services", name)
        row = tier.sidecar_class(name)
        if row is None:
            findings.append(model.finding(base, (
                f"sidecar-class: no row of the {tier.name} tier table (deploy/validators/tier.py) names "
                "this service; state its restart policy, healthcheck, memory, user and "
                "capabilities there")))
            continue
        problem = _image_finding(name, str(service.get("image") or ""), row, pins)
        if problem:
            findings.append(model.finding(join_path(base, "image"), f"sidecar-class: {problem}"))
        check = service.get("healthcheck") or {}
        has_check = bool(check) and not check.get("disable")
        actual = {"restart": service.get("restart") or "no", "healthcheck": has_check,
                  "user": service.get("user") or None,
                  "privileged": bool(service.get("privileged")),
                  "cap_add": _set(service.get("cap_add")),
                  "cap_drop": _set(service.get("cap_drop")),
                  "read_only": bool(service.get("read_only")),
                  "security_opt": _set(service.get("security_opt"))}
        wanted = {"restart": row.restart, "healthcheck": row.healthcheck, "user": row.user,
                  "privileged": row.privileged, "cap_add": _set(row.cap_add),
                  "cap_drop": _set(row.cap_drop), "read_only": row.read_only,
                  "security_opt": _set(row.security_opt)}
        for key, want in wanted.items():
            if actual[key] != want:
                findings.append(model.finding(join_path(base, key), (
                    f"sidecar-class: is {_show(actual[key])}, the {tier.name} tier's "
                    f"{row.name} row requires {_show(want)}")))
        raw_env = env_map((model.raw.get("services", {}).get(name) or {}).get("environment"))
        for variable in row.optional_env:
            value = raw_env.get(variable)
            if value is not None and not OPTIONAL.match(value):
                findings.append(model.finding(join_path(base, "environment", variable), (
                    f"sidecar-class: {variable} must be optional (`${{VAR:-}}`), the "
                    f"{row.name} row says so: a host without it could not start the file "
                    f"(found {shown(variable, value)})")))
        if row.privileged and not row.privileged_reason:
            findings.append(model.finding(join_path(base, "privileged"), (
                f"sidecar-class: the {row.name} row allows privileged without a reason")))
    return findings


# --- model-revision -------------------------------------------------------------------------

def _downloader_script(service: Mapping[str, Any]) -> str | None:
    command = command_argv(service.get("command"))
    if "-c" in command_argv(service.get("entrypoint")) and command:
        return command[0].replace("$$", "$")
    return None


def revision_findings(model: Model, tier: Tier) -> list[Finding]:
    pins = pin_table.load()
    findings = []
    fetched: set[tuple[str, str]] = set()
    hub_uses: list[uses.Use] = []
    for name, service in sorted(model.services.items()):
        row = tier.sidecar_class(name)
        script = _downloader_script(service) if row and row.name == "downloader" else None
        if script is not None:
            found = list(uses.script_uses(join_path("services", name, "command", 0), script))
            fetched |= {(u.repository, u.value) for u in found
                        if u.file is None and u.field == "revision"}
            hub_uses += found
    engine_names = _engine_names(model)
    for name in engine_names:
        argv = command_argv(model.services[name].get("command"))
        base = join_path("services", name, "command")
        if "--model-path" in argv[:-1] and "--revision" not in argv[:-1]:
            findings.append(model.finding(base, (
                f"model-revision: loads {argv[argv.index('--model-path') + 1]} without "
                "--revision; the pin table fixes the commit it must load")))
        for use in uses.argv_uses(base, argv):
            hub_uses.append(use)
            if use.file is None and (use.repository, use.value) not in fetched:
                findings.append(model.finding(use.where, (
                    f"model-revision: loads {use.repository} at {use.value!r}, which the "
                    "downloader does not fetch (the engine would start without its weights)")))
    for use in hub_uses:
        what = f"{use.repository} {use.file}" if use.file else use.repository
        line = f"line {use.line}: " if use.line else ""
        pin = pins.by_hub_repository(use.repository, use.file)
        if pin is None:
            findings.append(model.finding(use.where, (
                f"model-revision: {line}{what} is named by no hf_model/hf_file row of "
                f"{pins.path}")))
        elif use.value != getattr(pin, use.field):
            findings.append(model.finding(use.where, (
                f"model-revision: {line}{what} {use.field} {use.value!r}, the pin {pin.name} is "
                f"{getattr(pin, use.field)!r} (a moved branch loads other weights, or none)")))
    return findings


# --- gpu-monitor ----------------------------------------------------------------------------

def _reserves_every_gpu(service: Mapping[str, Any]) -> bool:
    """A device reservation with `count: all` (Compose prints -1)."""
    devices = ((((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {})
               .get("devices") or [])
    return any(str((device or {}).get("count")) in ("all", "-1") for device in devices)


def gpu_monitor_findings(model: Model, tier: Tier) -> list[Finding]:
    used: dict[str, str] = {}
    for name in _engine_names(model):
        for gpu in device_ids(model.services[name]):
            used.setdefault(gpu, name)
    findings = []
    for name, service in sorted(model.services.items()):
        row = tier.sidecar_class(name)
        if row is None or not row.monitors_all_gpus:
            continue
        every = _reserves_every_gpu(service)
        missing = [] if every else sorted(set(used) - set(device_ids(service)), key=int)
        if missing:
            owners = sorted({used[g] for g in missing})
            findings.append(model.finding(
                join_path("services", name, "deploy.resources.reservations.devices"), (
                    f"gpu-monitor: does not reserve GPU {', '.join(missing)}, which "
                    f"{', '.join(owners)} use; their GPU metrics would be missing")))
    return findings


RULES = (upstream_findings, registrar_findings, mount_findings, sidecar_findings,
         revision_findings, gpu_monitor_findings)
