"""nginx: embedded configs pass a real `nginx -t`; streaming keepalive.

Rules, per nginx config embedded in compose `configs` and mounted into an nginx service:
  * the text the container sees (Compose interpolation applied, `$$` -> `$`) passes `nginx -t`;
  * every HTTP/2 server block that proxies to an inference proxy sets `keepalive_timeout` and
    `keepalive_requests` in server scope (long streams must not be cut by the defaults);
Metrics isolation is judged by a real nginx on every public listener (runtime.py,
`public-metrics`), not by reading location blocks.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Iterable

from deploy.validators import cli, nginx_conf, nginx_prefix
from deploy.validators.compose_doc import ComposeFile, Finding
from deploy.validators.topology import (EmbeddedNginx, inference_proxies, nginx_configs, proxied_hosts,
                                        upstream_hosts)

VALIDATOR = "nginx"


def _serves_http2(server: nginx_conf.Directive) -> bool:
    http2 = any("http2" in listen.values for listen in server.children("listen"))
    return http2 or any(d.values[:1] == ["on"] for d in server.children("http2"))


def _describe(server: nginx_conf.Directive) -> str:
    listens = ", ".join(" ".join(l.values) for l in server.children("listen")) or "no listen"
    return f"server block at line {server.line} (listen {listens})"


def static_findings(compose: ComposeFile, items: Iterable[EmbeddedNginx]) -> list[Finding]:
    """The keepalive rule on the parsed configs (no nginx binary needed)."""
    proxies = set(inference_proxies(compose))
    findings: list[Finding] = []
    for item in items:
        if item.error:
            findings.append(compose.finding(item.where, f"Compose interpolation fails: {item.error}"))
        if item.syntax_error:
            findings.append(compose.finding(item.where, (
                f"nginx syntax: {item.syntax_error} (braces and `;` must balance)")))
            continue
        upstreams = upstream_hosts(item.directives)
        for server in nginx_conf.servers(item.directives):
            hosts = proxied_hosts(server, item.directives, upstreams) & proxies
            if not hosts:
                continue
            if _serves_http2(server):
                missing = [k for k in ("keepalive_timeout", "keepalive_requests")
                           if not server.children(k)]
                if missing:
                    findings.append(compose.finding(item.where, (
                        f"{_describe(server)} serves HTTP/2 in front of {', '.join(sorted(hosts))} "
                        f"but lacks {' and '.join(missing)} in server scope; long streams are "
                        f"closed by the defaults (set e.g. `keepalive_timeout 1h; "
                        f"keepalive_requests 1000000;`)")))
    return findings


def check(compose: ComposeFile, args: argparse.Namespace) -> list[Finding]:
    items = nginx_configs(compose)
    findings = static_findings(compose, items)
    if args.nginx_bin:
        for group in nginx_prefix.group_by_service(items):
            for error in nginx_prefix.run_nginx_t(group, args.nginx_bin, args.openssl_bin):
                findings.append(compose.finding(error.where, f"nginx -t: {error.message}"))
    return findings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nginx-bin", default=os.environ.get("NGINX_BIN", shutil.which("nginx",
                   path="/usr/sbin:/usr/bin") or ""),
                   help="nginx binary for `nginx -t` (default: Debian's /usr/sbin/nginx); "
                        "empty skips the real check")
    p.add_argument("--openssl-bin", default=shutil.which("openssl") or "/usr/bin/openssl",
                   help="openssl, for the throwaway self-signed certificate")


def main(argv: list[str] | None = None) -> int:
    return cli.main(VALIDATOR, __doc__.splitlines()[0], check, add_arguments, argv)


if __name__ == "__main__":
    sys.exit(main())
