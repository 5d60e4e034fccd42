"""Service contracts: dependency direction, registrar auth, proxy environment, digest pinning.

Rules:
  * an inference proxy never `depends_on` an engine (a restarting engine must not take the proxy,
    and with it every other replica, down);
  * nginx `depends_on` every inference proxy its embedded config routes to;
  * inference proxies pass WEB_CONTEXT_SEARCH_URL and WEB_CONTEXT_SEARCH_API_KEY;
  * the model-proxy registrar gets PROXY_TOKEN from the host and every probe of the inference
    API sends it as a bearer token: a header file (`-H @$FILE`) the script writes from it, or
    (refused by the next rule) an `Authorization: Bearer $PROXY_TOKEN` argument;
  * token-argv: no curl in the registrar's script takes a credential-named variable as an
    argument (a process's argv is world-readable in /proc/<pid>/cmdline);
  * every image (services and `x-*` anchors) is pinned by digest, and nothing is built.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Mapping

from pins import table as pin_table
from tools.oci.reference import ReferenceError, parse_reference
from deploy.validators import cli
from deploy.validators.secrets import SECRET_NAME, shown
from deploy.validators.compose_doc import (ComposeFile, Finding, config_contents, depends_on_names,
                                           env_map, join_path)
from deploy.validators.topology import (all_proxied_hosts, engines, inference_proxies, is_nginx_service,
                                        nginx_configs)

VALIDATOR = "service-contracts"

PROXY_REQUIRED_ENV = ("WEB_CONTEXT_SEARCH_URL", "WEB_CONTEXT_SEARCH_API_KEY")
REGISTRAR = "model-proxy-registrar"
# Probes of the inference API the registrar makes; each must authenticate.
PROBED = re.compile(r"/v1/chat/completions|/v1/models|\$\{?READY_URL\}?")
BEARER = re.compile(r"Authorization: Bearer \$\{?(INFERENCE_TOKEN|PROXY_TOKEN)\}?")
TOKEN_FROM_HOST = re.compile(r"^\$\{PROXY_TOKEN(:?\?[^}]*)?\}$")
# `printf 'Authorization: Bearer %s\n' "$PROXY_TOKEN" >"$FILE"`: FILE holds the inference bearer.
HEADER_FILE_DEF = re.compile(
    r"printf\s+'Authorization: Bearer %s\\n'\s+\"\$\{?(INFERENCE_TOKEN|PROXY_TOKEN)\}?\""
    r"\s*>\s*\"?\$\{?(?P<var>[A-Za-z_][A-Za-z0-9_]*)\}?\"?")
SHELL_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
INFERENCE_TOKEN_DEF = re.compile(r"""^\s*(export\s+)?INFERENCE_TOKEN=["']?\$\{?PROXY_TOKEN\}?["']?\s*$""",
                                 re.M)


def dependency_findings(compose: ComposeFile) -> list[Finding]:
    findings = []
    engine_names = set(engines(compose))
    proxies = inference_proxies(compose)
    for proxy in proxies:
        deps = depends_on_names(compose.services[proxy].get("depends_on"))
        for dep in sorted(set(deps) & engine_names):
            findings.append(compose.finding(join_path("services", proxy, "depends_on"), (
                f"inference proxy depends on engine {dep}: remove it (the proxy health-checks "
                "its backends; a dependency would restart the proxy with one replica)")))
    routed_by: dict[str, set[str]] = {}
    for item in nginx_configs(compose):
        hosts = all_proxied_hosts(item) & set(proxies)
        for service in item.services:
            routed_by.setdefault(service, set()).update(hosts)
    for name, service in compose.services.items():
        if not is_nginx_service(service):
            continue
        deps = set(depends_on_names(service.get("depends_on")))
        for proxy in sorted(routed_by.get(name, set()) - deps):
            findings.append(compose.finding(join_path("services", name, "depends_on"), (
                f"nginx routes to inference proxy {proxy} but does not depend on it: "
                f"add `{proxy}` to depends_on")))
    return findings


def proxy_env_findings(compose: ComposeFile) -> list[Finding]:
    findings = []
    for proxy in inference_proxies(compose):
        env = env_map(compose.services[proxy].get("environment"))
        for key in PROXY_REQUIRED_ENV:
            if not env.get(key):
                findings.append(compose.finding(join_path("services", proxy, "environment", key), (
                    f"inference proxy must pass {key} (web context search); "
                    f"set `{key}: ${{{key}:?{key} must be set}}`")))
    return findings


def _logical_lines(script: str) -> list[str]:
    return script.replace("\\\n", " ").splitlines()


def registrar_findings(compose: ComposeFile) -> list[Finding]:
    service = compose.services.get(REGISTRAR)
    if not isinstance(service, Mapping):
        return []
    base = join_path("services", REGISTRAR)
    findings = []
    env = env_map(service.get("environment"))
    if not TOKEN_FROM_HOST.match(env.get("PROXY_TOKEN") or ""):
        findings.append(compose.finding(join_path(base, "environment", "PROXY_TOKEN"), (
            f"registrar must take PROXY_TOKEN from the host: `PROXY_TOKEN: ${{PROXY_TOKEN}}` "
            f"(found {shown('PROXY_TOKEN', env.get('PROXY_TOKEN'))})")))
    contents = config_contents(compose)
    scripts: list[tuple[str, str]] = []
    for item in service.get("configs") or []:
        source = item if isinstance(item, str) else (item or {}).get("source")
        if source in contents:
            scripts.append((join_path("configs", source, "content"), contents[source]))
    command = service.get("command")
    if isinstance(command, list):
        scripts += [(join_path(base, "command", i), str(t)) for i, t in enumerate(command)
                    if "curl" in str(t)]
    elif isinstance(command, str) and "curl" in command:
        scripts.append((join_path(base, "command"), command))
    if not scripts:
        return findings + [compose.finding(base, (
            "registrar has no script (config mounted by the service or inline command) to check"))]
    for where, raw in scripts:
        script = raw.replace("$$", "$")
        if "INFERENCE_TOKEN" in script and not INFERENCE_TOKEN_DEF.search(script):
            findings.append(compose.finding(where, (
                'registrar script uses INFERENCE_TOKEN but does not set it from the host\'s '
                'token: `INFERENCE_TOKEN="$${PROXY_TOKEN}"` (compose-escaped)')))
        header_files = {m.group("var") for m in HEADER_FILE_DEF.finditer(script)}
        for number, line in enumerate(_logical_lines(script), start=1):
            if line.lstrip().startswith("#") or not re.search(r"\bcurl\b", line):
                continue
            sends_file = any(re.search(rf'-H\s+"?@\$\{{?{re.escape(v)}\b', line)
                             for v in header_files)
            if PROBED.search(line) and not (sends_file or BEARER.search(line)):
                findings.append(compose.finding(where, (
                    f"line {number}: curl probe of the inference API without a bearer token "
                    "(add `-H \"@$$INFERENCE_AUTH\"`, a file written with `printf "
                    "'Authorization: Bearer %s\\n' \"$$PROXY_TOKEN\"`): "
                    f"{' '.join(line.split())[:120]}")))
            for name in sorted({v for v in SHELL_VAR.findall(line) if SECRET_NAME.search(v)}):
                findings.append(compose.finding(where, (
                    f"token-argv: line {number}: curl takes ${name} as an argument, readable by "
                    "every user of the host in /proc/<pid>/cmdline; write it to a 0600 header "
                    "file with the shell's builtin printf and pass `-H @FILE`")))
    return findings


def digest_findings(compose: ComposeFile) -> list[Finding]:
    findings = []
    blocks: list[tuple[str, Any]] = [(join_path("services", n), s) for n, s in compose.services.items()]
    blocks += [(str(k), v) for k, v in compose.doc.items() if str(k).startswith("x-")]
    for where, block in blocks:
        if not isinstance(block, Mapping):
            continue
        if "build" in block:
            findings.append(compose.finding(join_path(where, "build"), (
                "services are deployed from published images: remove `build` and pin `image` "
                "by digest")))
        image = block.get("image")
        if image is None:
            if where.startswith("services.") and "build" not in block:
                findings.append(compose.finding(join_path(where, "image"), "no image"))
            continue
        # An image whose pin is unresolved is pinned to the pin table's sentinel; the
        # deployability gate (//compose:deployable) reports it, with the resolve command.
        try:
            ref = parse_reference(image, "image", unresolved=pin_table.load().unresolved)
        except ReferenceError as err:
            findings.append(compose.finding(join_path(where, "image"), (
                f"{err}; use <host>/<repository>[:tag]@sha256:<64 hex>")))
            continue
        if not ref.unresolved and ref.digest is None:
            findings.append(compose.finding(join_path(where, "image"), (
                f"image {image!r} is not pinned by digest: use <repository>@sha256:<64 hex> "
                "(a tag can move under a running deployment)")))
    return findings


def check(compose: ComposeFile, args: argparse.Namespace) -> list[Finding]:
    return (dependency_findings(compose) + proxy_env_findings(compose)
            + registrar_findings(compose) + digest_findings(compose))


def main(argv: list[str] | None = None) -> int:
    return cli.main(VALIDATOR, __doc__.splitlines()[0], check, None, argv)


if __name__ == "__main__":
    sys.exit(main())
