"""public-metrics: a real nginx, asked for metrics paths on every public listener, never proxies.

`location = /metrics` answers /metrics itself but lets /metrics/, /metrics/x, /metricsz and
/v1/metrics/ through to the proxy, so the rule is judged by nginx, not by reading the config:
the nginx service's configs are placed as in the container (nginx_prefix.build_prefix), every
upstream service name is mapped to its own loopback address where a stub HTTP server records
what reaches it, every `listen` binds 127.0.0.1, and nginx runs for real in a private network
namespace (loopback brought up with an ioctl). Each public listener (a port the default-started nginx service publishes) gets the
PROBE_PATHS; any request a stub receives is a finding naming the listener and the path.
"""

from __future__ import annotations

import argparse
import fcntl
import http.client
import ipaddress
import json
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from deploy.validators import nginx_conf, nginx_prefix
from deploy.validators.compose_doc import Finding
from deploy.validators.model import Model
from deploy.validators.topology import (EmbeddedNginx, is_nginx_service, listen_ports, nginx_configs,
                                        url_host)

PROBE_PATHS = ("/metrics", "/metrics/", "/metrics/x", "/metricsz", "//metrics", "/%6Detrics",
               "/v1/metrics", "/v1/metrics/", "/v1/metrics/x", "/v1/metricsz")
READY_TIMEOUT_S = 20.0
SERVICE_NET = ipaddress.ip_address("127.0.1.1")
UNKNOWN_NET = ipaddress.ip_address("127.0.2.1")


@dataclass(frozen=True)
class Listener:
    config: str  # dotted path of the config in the compose file
    line: int  # the server block's line
    port: int  # container port nginx listens on
    host_port: str  # what the service publishes it as
    tls: bool
    server_name: str


@dataclass(frozen=True)
class Upstream:
    name: str  # service name (or `unknown host <name>`)
    ip: str
    port: int


def _public_listeners(model: Model, service: str, items: list[EmbeddedNginx]) -> list[Listener]:
    published = {int(p["target"]): str(p.get("published"))
                 for p in model.services[service].get("ports") or [] if p.get("published")}
    out = []
    for item in items:
        for server in nginx_conf.servers(item.directives):
            tls = any("ssl" in l.values for l in server.children("listen"))
            names = [v for d in server.children("server_name") for v in d.values]
            for port in listen_ports(server):
                if port in published:
                    out.append(Listener(item.where, server.line, port, published[port], tls,
                                        names[0] if names else "localhost"))
    return out


def _hosts_and_ports(model: Model, items: list[EmbeddedNginx]) -> tuple[dict[str, str], set[int]]:
    """A loopback address for every name nginx could proxy to, and the ports it would use."""
    hosts = {name: str(SERVICE_NET + i) for i, name in enumerate(sorted(model.services))}
    ports = {80}
    unknown = 0
    for item in items:
        pass_vars = nginx_prefix.pass_variables(item.directives)
        for d in nginx_conf.walk(item.directives):
            if d.name in nginx_prefix.UPSTREAM_PASSES or (d.name == "server" and d.block is None):
                ports |= {int(p) for p in re.findall(r":(\d+)", " ".join(d.values))}
            candidates = []
            if d.name == "set" and len(d.args) >= 2 and d.args[0].text.lstrip("$") in pass_vars:
                candidates.append(d.args[1].text)
            if d.name in nginx_prefix.UPSTREAM_PASSES and d.args:
                candidates.append(url_host(d.args[0].text))
            for name in candidates:
                if (re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", name) and name not in hosts
                        and not name.startswith("$")):
                    hosts[name] = str(UNKNOWN_NET + unknown)
                    unknown += 1
    return hosts, ports


def probe_findings(model: Model, nginx_bin: str, openssl_bin: str) -> list[Finding]:
    compose = model.as_compose_file()
    findings = []
    by_service: dict[str, list[EmbeddedNginx]] = {}
    for item in nginx_configs(compose):
        if item.syntax_error is None:
            by_service.setdefault(item.services[0], []).append(item)
    for service, items in sorted(by_service.items()):
        spec = model.services[service]
        if spec.get("profiles") or not is_nginx_service(spec):
            continue
        listeners = _public_listeners(model, service, items)
        if not listeners:
            continue
        hosts, ports = _hosts_and_ports(model, items)
        names = {ip: (name if name in model.services else f"unknown host {name!r}")
                 for name, ip in hosts.items()}
        upstreams = [Upstream(names[ip], ip, port) for ip in sorted(set(hosts.values()))
                     for port in sorted(ports)]
        try:
            results = _run(items, listeners, upstreams, hosts, nginx_bin, openssl_bin)
        except ProbeError as exc:
            findings.append(model.finding(items[0].where, f"public-metrics: {exc}"))
            continue
        for listener in listeners:
            leaked = [r for r in results if r["port"] == listener.port
                      and r["line"] == listener.line and r["reached"]]
            if leaked:
                shown = ", ".join(f"{r['path']} -> {r['reached']}" for r in leaked)
                findings.append(model.finding(listener.config, (
                    f"public-metrics: server block at line {listener.line} (listen "
                    f"{listener.port}{' ssl' if listener.tls else ''}, host port "
                    f"{listener.host_port}) proxies metrics paths through a real nginx: {shown}; "
                    "block them by prefix: `location ^~ /metrics { return 404; }` and "
                    "`location ^~ /v1/metrics { return 404; }`")))
    return findings


class ProbeError(Exception):
    pass


def _run(items: list[EmbeddedNginx], listeners: list[Listener], upstreams: list[Upstream],
         hosts: dict[str, str], nginx_bin: str, openssl_bin: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="nginx-probe-", dir=nginx_prefix._scratch_root()) as tmp:
        prefix = Path(tmp) / "prefix"
        prefix.mkdir()
        nginx_prefix.build_prefix(items, prefix, nginx_bin, openssl_bin, hosts=hosts,
                                listen_host="127.0.0.1")
        for path in [prefix, *prefix.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({
            "nginx": [nginx_bin, "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"),
                      "-e", str(prefix / "logs" / "error.log"),
                      "-g", "daemon off; master_process off;"],
            "error_log": str(prefix / "logs" / "error.log"),
            "listeners": [asdict(l) for l in listeners],
            "upstreams": [asdict(u) for u in upstreams],
        }))
        unshare = (["unshare", "--net", "--"] if os.geteuid() == 0
                   else ["unshare", "--user", "--map-root-user", "--net", "--"])
        env = {"PATH": "/usr/sbin:/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.run([*unshare, sys.executable, "-m", "validators.nginx_probe",
                               "--child", str(spec)], capture_output=True, text=True,
                              timeout=120, env=env)
        if proc.returncode != 0:
            raise ProbeError("the nginx probe failed: " + " ".join(proc.stderr.split())[-600:])
        return json.loads(proc.stdout)


# --- inside the private network namespace ------------------------------------------------------

def _stub(upstream: Upstream, seen: list[tuple[str, str]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((upstream.name, self.path))
            body = b"stub upstream\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((upstream.ip, upstream.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _wait_listening(ports: set[int], nginx: subprocess.Popen, error_log: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = set(ports)
    while pending:
        if nginx.poll() is not None:
            raise SystemExit(f"nginx exited {nginx.returncode}: {Path(error_log).read_text()[-600:]}")
        for port in list(pending):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    pending.discard(port)
        if not pending:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"nginx did not listen on {sorted(pending)} within {READY_TIMEOUT_S}s")
        # nginx listens within milliseconds of its start: a 50 ms step (and a last one after
        # every port answered) cost each probe 50-100 ms of waiting.
        time.sleep(0.005)


def _client_tls() -> ssl.SSLContext:
    """The probe reaches its own throwaway certificate: no verification."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _request(listener: Listener, path: str, context: ssl.SSLContext) -> int:
    if listener.tls:
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            "127.0.0.1", listener.port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": listener.server_name})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _loopback_up() -> None:
    """A new network namespace starts with `lo` down; bring it up (what `ip link set lo up`
    does, without needing iproute2)."""
    get_flags, set_flags, iff_up = 0x8913, 0x8914, 0x1  # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = fcntl.ioctl(s, get_flags, struct.pack("16sh22x", b"lo", 0))
        flags = struct.unpack("16sh22x", ifreq)[1]
        fcntl.ioctl(s, set_flags, struct.pack("16sh22x", b"lo", flags | iff_up))


def child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    _loopback_up()
    seen: list[tuple[str, str]] = []
    stubs = [_stub(Upstream(**u), seen) for u in spec["upstreams"]]
    listeners = [Listener(**l) for l in spec["listeners"]]
    nginx = subprocess.Popen(spec["nginx"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    results = []
    # One context for every request: creating one loads the CA store (~35 ms), which was most
    # of the probe's time (10 paths per TLS listener).
    tls = _client_tls()
    try:
        _wait_listening({l.port for l in listeners}, nginx, spec["error_log"])
        for listener in listeners:
            for path in PROBE_PATHS:
                before = len(seen)
                status = _request(listener, path, tls)
                reached = seen[before][0] if len(seen) > before else None
                results.append({"port": listener.port, "line": listener.line, "path": path,
                                "status": status, "reached": reached})
    finally:
        os.killpg(nginx.pid, signal.SIGTERM)
        nginx.wait(timeout=30)
        for stub in stubs:
            stub.server_close()  # serving threads are daemons: they end with this process
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="internal: runs inside the probe's network namespace")
    p.add_argument("--child", required=True)
    sys.exit(child(p.parse_args().child))
