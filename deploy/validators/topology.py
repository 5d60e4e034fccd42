"""Who is who in a compose file: inference proxies, engines, nginx and its embedded configs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from tools.oci.reference import ReferenceError, parse_reference
from deploy.validators import nginx_conf
from deploy.validators.compose_doc import (CI_DUMMY_ENV, ComposeFile, InterpolationError, command_argv,
                                           config_contents, env_map, interpolate)


def image_repository(image: str) -> str:
    """`docker.io/library/nginx:1.27@sha256:…` -> `docker.io/library/nginx`.

    Only names services, so a malformed reference (services.py reports it) gives its text
    before any digest instead of an error.
    """
    name = image.partition("@")[0]
    try:
        return str(parse_reference(name).repository)
    except ReferenceError:
        return name


def is_inference_proxy(name: str, service: Mapping[str, Any]) -> bool:
    """Proxies in front of engines: `proxy-*`/`vllm-proxy-*`, or MODEL_NAME + CLOUD_API_URL env."""
    if name.startswith(("proxy-", "vllm-proxy-")):
        return True
    env = env_map(service.get("environment"))
    return "MODEL_NAME" in env and "CLOUD_API_URL" in env


def inference_proxies(compose: ComposeFile) -> list[str]:
    return [n for n, s in compose.services.items()
            if isinstance(s, Mapping) and is_inference_proxy(n, s)]


def is_engine(service: Any) -> bool:
    """An SGLang engine: its command runs `sglang serve` / `sglang.launch_server`."""
    if not isinstance(service, Mapping):
        return False
    argv = command_argv(service.get("command"))
    entry = service.get("entrypoint")
    argv = command_argv(entry) + argv if entry else argv
    text = " ".join(argv[:4])
    return text.startswith("sglang serve") or "sglang.launch_server" in text


def engines(compose: ComposeFile) -> list[str]:
    return [n for n, s in compose.services.items() if is_engine(s)]


def engine_port(service: Mapping[str, Any]) -> int:
    """The port an engine serves on: its `--port`, else SGLang's default 30000."""
    argv = command_argv(service.get("command"))
    if "--port" in argv[:-1] and argv[argv.index("--port") + 1].isdigit():
        return int(argv[argv.index("--port") + 1])
    return 30000


def published_ports(port: Mapping[str, Any]) -> list[int]:
    """Host ports of one canonical `ports` entry (`published` may be a range); [] if none."""
    low, _, high = str(port.get("published") or "").partition("-")
    try:
        return list(range(int(low), int(high or low) + 1))
    except ValueError:
        return []


def device_ids(service: Mapping[str, Any]) -> list[str]:
    """GPU ids a service reserves (`deploy.resources.reservations.devices[].device_ids`)."""
    devices = ((((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {})
               .get("devices") or [])
    return [str(d) for device in devices for d in (device or {}).get("device_ids") or []]


def is_nginx_service(service: Any) -> bool:
    if not isinstance(service, Mapping) or not isinstance(service.get("image"), str):
        return False
    return "nginx" in image_repository(service["image"]).rsplit("/", 1)[-1]


@dataclass
class EmbeddedNginx:
    """One nginx config embedded in `configs`, as the container sees it after interpolation."""

    config: str  # name under top-level `configs`
    target: str  # mount path inside the nginx container
    services: list[str]
    text: str  # interpolated (`$$` -> `$`)
    error: str = ""  # interpolation failure
    directives: list[nginx_conf.Directive] = field(default_factory=list)
    syntax_error: nginx_conf.NginxSyntaxError | None = None

    @property
    def where(self) -> str:
        return f"configs.{self.config}.content"


def _mounts(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    for item in service.get("configs") or []:
        if isinstance(item, str):
            out.append((item, f"/{item}"))
        elif isinstance(item, Mapping) and item.get("source"):
            source = str(item["source"])
            out.append((source, str(item.get("target") or f"/{source}")))
    return out


def nginx_configs(compose: ComposeFile,
                  env: Mapping[str, str] = CI_DUMMY_ENV) -> list[EmbeddedNginx]:
    """Embedded configs mounted into nginx services, parsed; errors are kept on the object."""
    contents = config_contents(compose)
    found: dict[str, EmbeddedNginx] = {}
    for name, service in compose.services.items():
        if not is_nginx_service(service):
            continue
        for source, target in _mounts(service):
            if source not in contents:
                continue
            if source in found:
                found[source].services.append(name)
                continue
            item = EmbeddedNginx(source, target, [name], "")
            try:
                item.text = interpolate(contents[source], env)
            except InterpolationError as exc:
                item.error = str(exc)
                item.text = contents[source].replace("$$", "$")
            item.target, item.text = _template_step(service, target, item.text, env)
            try:
                item.directives = nginx_conf.parse(item.text)
            except nginx_conf.NginxSyntaxError as exc:
                item.syntax_error = exc
            found[source] = item
    return list(found.values())


TEMPLATES = "/etc/nginx/templates/"


def _template_step(service: Mapping[str, Any], target: str, text: str,
                   env: Mapping[str, str]) -> tuple[str, str]:
    """The nginx image's entrypoint renders templates/*.template into conf.d with envsubst over
    the container's environment (only variables that are set, optionally filtered)."""
    container_env = {}
    for key, value in env_map(service.get("environment")).items():
        try:
            container_env[key] = interpolate(value, env) if value is not None else env.get(key, "")
        except InterpolationError:
            container_env[key] = ""
    suffix = container_env.get("NGINX_ENVSUBST_TEMPLATE_SUFFIX", ".template")
    if not (target.startswith(TEMPLATES) and target.endswith(suffix)):
        return target, text
    pattern = container_env.get("NGINX_ENVSUBST_FILTER", "")
    names = [k for k in container_env if re.search(pattern, k)]
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(r"\$(\{" + name + r"\}|" + name + r"(?![A-Za-z0-9_]))",
                      lambda _m, v=container_env[name]: v, text)
    output = container_env.get("NGINX_ENVSUBST_OUTPUT_DIR", "/etc/nginx/conf.d")
    return f"{output}/{target[len(TEMPLATES):-len(suffix)]}", text


_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _set_values(scope: list[nginx_conf.Directive]) -> dict[str, str]:
    values: dict[str, str] = {}
    for d in nginx_conf.walk(scope):
        if d.name == "set" and len(d.args) >= 2:
            values[d.args[0].text.lstrip("$")] = d.args[1].text
    return values


Endpoint = tuple[str, "int | None"]  # (host, port); port None when neither given nor implied


def upstream_hosts(directives: list[nginx_conf.Directive]) -> dict[str, list[Endpoint]]:
    """`upstream NAME { server HOST:PORT; }` -> {NAME: [(HOST, PORT), …]} (nginx's default 80)."""
    result: dict[str, list[Endpoint]] = {}
    for d in nginx_conf.walk(directives):
        if d.name == "upstream" and d.block is not None and d.args:
            result[d.args[0].text] = [url_endpoint(s.args[0].text, 80)
                                      for s in d.children("server") if s.args]
    return result


_SCHEME_PORTS = {"http": 80, "https": 443, "grpc": 80, "grpcs": 443}


def url_endpoint(url: str, default: int | None = None) -> Endpoint:
    """(host, port) of `http://host:port/path`, `host:port`, `[v6]:port`: without a port, the
    scheme's (http 80, https 443) or `default`; host '' for unix sockets."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if rest.startswith("unix:"):
        return "", None
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = rest.partition(":")
    if port.isdigit():
        return host, int(port)
    return host, _SCHEME_PORTS.get(scheme.lower(), default)


def url_host(url: str) -> str:
    """Host of `http://host:port/path`, `host:port`, `[v6]:port`; '' for unix sockets."""
    return url_endpoint(url)[0]


PASS_DIRECTIVES = ("proxy_pass", "grpc_pass")


def proxy_endpoints(server: nginx_conf.Directive, http_scope: list[nginx_conf.Directive],
                    upstreams: Mapping[str, list[Endpoint]]
                    ) -> list[tuple[nginx_conf.Directive, str, int | None]]:
    """(proxy_pass directive, host, port) of a server block, resolving `set $var host` and
    `upstream` names (an upstream's servers carry their own ports)."""
    values = {**_set_values([d for d in http_scope if d.name == "set"]), **_set_values([server])}
    routes: list[tuple[nginx_conf.Directive, str, int | None]] = []
    for d in server.walk():
        if d.name not in PASS_DIRECTIVES or not d.args:
            continue
        url = _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), d.args[0].text)
        host, port = url_endpoint(url)
        if host in upstreams:
            routes += [(d, h, p) for h, p in upstreams[host]]
        elif host:
            routes.append((d, host, port))
    return routes


def proxy_routes(server: nginx_conf.Directive, http_scope: list[nginx_conf.Directive],
                 upstreams: Mapping[str, list[Endpoint]]) -> list[tuple[nginx_conf.Directive, str]]:
    """(proxy_pass directive, host) pairs of a server block."""
    return [(d, host) for d, host, _ in proxy_endpoints(server, http_scope, upstreams)]


def proxied_hosts(server: nginx_conf.Directive, http_scope: list[nginx_conf.Directive],
                  upstreams: Mapping[str, list[Endpoint]]) -> set[str]:
    """Hosts a server block proxies to, resolving `set $var host` and `upstream` names."""
    return {host for _, host in proxy_routes(server, http_scope, upstreams)}


def listen_port(listen: nginx_conf.Directive) -> int | None:
    """Port of one `listen` (`443 ssl`, `127.0.0.1:8000`, `[::]:80`, a host alone: 80); None
    for a unix socket."""
    if not listen.args:
        return None
    tail = listen.args[0].text.rsplit(":", 1)[-1].rstrip("]")
    if tail.isdigit():
        return int(tail)
    return None if tail.startswith("unix") else 80


def listen_ports(server: nginx_conf.Directive) -> list[int]:
    """Ports of a server block's `listen` directives."""
    return [p for p in map(listen_port, server.children("listen")) if p is not None]


def location_of(directive: nginx_conf.Directive) -> str:
    """`location ^~ /debug` of the nearest enclosing location, or `server`."""
    node = directive.parent
    while node is not None and node.name != "location":
        node = node.parent
    return " ".join(["location", *node.values]) if node is not None else "server"


def all_proxied_hosts(item: EmbeddedNginx) -> set[str]:
    upstreams = upstream_hosts(item.directives)
    hosts: set[str] = set()
    for server in nginx_conf.servers(item.directives):
        hosts |= proxied_hosts(server, item.directives, upstreams)
    return hosts
