"""Runs a real `nginx -t` on embedded configs, unprivileged, in a throwaway prefix.

The container's view is rebuilt in a temporary prefix: the config sits where the nginx image's
stock nginx.conf includes it (conf.d/*.conf), certificate paths point at a throwaway self-signed
certificate, log/pid/temp paths move into the prefix, and every upstream host name becomes
127.0.0.1 (what `--add-host NAME:127.0.0.1` did for the reference system's `docker run`). All
rewrites replace argument tokens in place, so nginx's line numbers are the config's own.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from deploy.validators import nginx_conf
from deploy.validators.topology import EmbeddedNginx, url_host

# The official nginx image's /etc/nginx/nginx.conf, with paths moved into the prefix; embedded
# configs are mounted under conf.d/ and must coexist with it (e.g. `log_format main` exists).
STOCK_MAIN = """\
worker_processes 1;
error_log {prefix}/logs/error.log notice;
pid {prefix}/nginx.pid;
events {{
    worker_connections 1024;
}}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    log_format main '$remote_addr - $remote_user [$time_local] "$request" '
                    '$status $body_bytes_sent "$http_referer" '
                    '"$http_user_agent" "$http_x_forwarded_for"';
    access_log {prefix}/logs/access.log main;
    sendfile on;
    keepalive_timeout 65;
    client_body_temp_path {prefix}/tmp/client_body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    include {prefix}/conf.d/*.conf;
}}
"""

CERT_DIRECTIVES = {"ssl_certificate": "cert", "ssl_trusted_certificate": "cert",
                   "ssl_client_certificate": "cert", "ssl_certificate_key": "key"}
LOG_DIRECTIVES = ("access_log", "error_log")
TEMP_DIRECTIVES = ("client_body_temp_path", "proxy_temp_path", "fastcgi_temp_path",
                   "uwsgi_temp_path", "scgi_temp_path")
UPSTREAM_PASSES = ("proxy_pass", "grpc_pass", "uwsgi_pass", "fastcgi_pass", "scgi_pass")
_IP = re.compile(r"^(\d{1,3}(\.\d{1,3}){3}|localhost|[0-9a-fA-F:]*:[0-9a-fA-F:]*)$")
UNPRIVILEGED = 65534  # nobody
_PASS_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class NginxError:
    where: str  # dotted path of the config in the compose file
    message: str


def group_by_service(items: Iterable[EmbeddedNginx]) -> list[list[EmbeddedNginx]]:
    """Configs mounted into the same nginx service are tested together, as they load together."""
    groups: dict[str, list[EmbeddedNginx]] = {}
    for item in items:
        if item.syntax_error is None:
            groups.setdefault(item.services[0], []).append(item)
    return list(groups.values())


# Asked once per binary and process: a `check` run builds nine prefixes.
@functools.lru_cache(maxsize=None)
def nginx_version(nginx_bin: str) -> tuple[int, ...]:
    proc = subprocess.run([nginx_bin, "-v"], capture_output=True, text=True, timeout=30)
    m = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", proc.stderr + proc.stdout)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def _quote(value: str) -> str:
    return value if re.fullmatch(r"[^\s;{}'\"#]+", value) else '"' + value.replace('"', '\\"') + '"'


def pass_variables(directives: list[nginx_conf.Directive]) -> set[str]:
    """Variables a pass directive uses: only their `set` values are host names
    (`set $backend proxy-glm53; proxy_pass http://$backend:8000;`)."""
    return {m for d in nginx_conf.walk(directives) if d.name in UPSTREAM_PASSES
            for m in _PASS_VAR.findall(" ".join(d.values))}


def rewrite(item: EmbeddedNginx, prefix: Path, http2_directive: bool,
            hosts: Mapping[str, str] | None = None, listen_host: str | None = None) -> str:
    """The config with machine-specific paths and hosts moved into the test prefix.

    Upstream host names become 127.0.0.1, or `hosts[name]` when given (names reached through
    `set $var name` too); with `listen_host`, every `listen` binds that address."""
    edits: list[tuple[int, int, str]] = []
    hosts = hosts or {}
    upstream_names = {d.args[0].text for d in nginx_conf.walk(item.directives)
                      if d.name == "upstream" and d.args}
    pass_vars = pass_variables(item.directives)

    def replace(token: nginx_conf.Token, value: str) -> None:
        edits.append((token.start, token.end, _quote(value)))

    for d in nginx_conf.walk(item.directives):
        first = d.args[0] if d.args else None
        if first is None:
            continue
        if d.name in CERT_DIRECTIVES:
            replace(first, str(prefix / "certs" / f"{CERT_DIRECTIVES[d.name]}.pem"))
        elif d.name in LOG_DIRECTIVES:
            target = first.text
            if target != "off" and not target.startswith(("/dev/", "syslog:", "memory:")):
                replace(first, str(prefix / "logs" / (Path(target).name or "log")))
        elif d.name in TEMP_DIRECTIVES:
            replace(first, str(prefix / "tmp" / d.name))
        elif d.name == "pid":
            replace(first, str(prefix / "nginx.pid"))
        elif d.name == "include" and not first.text.startswith("/"):
            replace(first, f"/etc/nginx/{first.text}")
        elif d.name == "include" and first.text.startswith("/etc/nginx/conf.d/"):
            replace(first, str(prefix / "conf.d" / first.text.removeprefix("/etc/nginx/conf.d/")))
        elif d.name in UPSTREAM_PASSES or (d.name == "server" and d.block is None
                                          and d.parent is not None and d.parent.name == "upstream"):
            host = url_host(first.text)
            if host and "$" not in host and not _IP.match(host) and host not in upstream_names:
                replace(first, first.text.replace(host, hosts.get(host, "127.0.0.1"), 1))
        elif (d.name == "set" and len(d.args) >= 2 and d.args[1].text in hosts
              and d.args[0].text.lstrip("$") in pass_vars):
            replace(d.args[1], hosts[d.args[1].text])
        elif d.name == "listen" and listen_host and not first.text.startswith("unix:"):
            port = first.text.rsplit(":", 1)[-1].rstrip("]")
            replace(first, f"{listen_host}:{port if port.isdigit() else 80}")
        elif d.name == "http2" and not http2_directive and d.name_token is not None:
            # `http2 on;` (nginx >= 1.25.1) is the `listen … http2` parameter of older nginx.
            edits.append((d.name_token.start, d.end, " " * 0))
            if first.text == "on" and d.parent is not None:
                for listen in d.parent.children("listen"):
                    if listen.args and "http2" not in listen.values:
                        last = listen.args[-1]
                        edits.append((last.end, last.end, " http2"))
    text = item.text
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _self_signed(openssl_bin: str, certs: Path) -> None:
    subprocess.run(
        [openssl_bin, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=nginx-t.invalid",
         "-keyout", str(certs / "key.pem"), "-out", str(certs / "cert.pem")],
        check=True, capture_output=True, timeout=60)


def _scratch_root() -> str | None:
    # The unprivileged nginx must traverse the prefix: Bazel's TMPDIR lives under /root.
    return "/tmp" if os.access("/tmp", os.W_OK) else None


def build_prefix(items: list[EmbeddedNginx], prefix: Path, nginx_bin: str, openssl_bin: str,
                 **rewrite_args) -> dict[str, str]:
    """The container's nginx view under `prefix`; returns {file written: compose dotted path}."""
    version = nginx_version(nginx_bin)
    for sub in ("conf.d", "certs", "logs", "tmp"):
        (prefix / sub).mkdir()
    _self_signed(openssl_bin, prefix / "certs")
    names: dict[str, str] = {}
    main_item = next((i for i in items if i.target == "/etc/nginx/nginx.conf"), None)
    for item in items:
        body = rewrite(item, prefix, http2_directive=version >= (1, 25, 1), **rewrite_args)
        dest = (prefix / "nginx.conf" if item is main_item
                else prefix / "conf.d" / (Path(item.target).name or f"{item.config}.conf"))
        if item is not main_item and dest.suffix != ".conf":
            dest = dest.with_name(dest.name + ".conf")
        dest.write_text(body)
        names[str(dest)] = item.where
    if main_item is None:
        (prefix / "nginx.conf").write_text(STOCK_MAIN.format(prefix=prefix))
        names[str(prefix / "nginx.conf")] = "nginx.conf (stock nginx image main config)"
    return names


def run_nginx_t(items: list[EmbeddedNginx], nginx_bin: str, openssl_bin: str) -> list[NginxError]:
    """`nginx -t` on one service's configs; errors name the compose config and line."""
    if not items:
        return []
    with tempfile.TemporaryDirectory(prefix="nginx-t-", dir=_scratch_root()) as tmp:
        prefix = Path(tmp)
        names = build_prefix(items, prefix, nginx_bin, openssl_bin)
        # nginx -t writes its pid and error log: the unprivileged user owns the prefix.
        for path in [prefix, *prefix.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
            if os.geteuid() == 0:
                try:
                    os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
                except OSError as exc:
                    return [NginxError(items[0].where, (
                        f"cannot hand the test prefix to uid {UNPRIVILEGED} ({exc.strerror}): "
                        "this user namespace does not map it; run outside Bazel's sandbox "
                        "(tags = [\"no-sandbox\"])"))]
        argv = [nginx_bin, "-t", "-q", "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"),
                "-e", str(prefix / "logs" / "error.log")]
        argv = _isolated(argv)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/sbin:/usr/bin:/bin"})
        if proc.returncode == 0:
            return []
        return _errors(proc.stderr + proc.stdout, names, items[0].where, prefix)


def _isolated(argv: list[str]) -> list[str]:
    """nginx -t binds every `listen` socket: give it a private network namespace (no clash with
    ports in use on this machine) and run it as nobody with only CAP_NET_BIND_SERVICE."""
    if os.geteuid() == 0:
        return ["unshare", "--net", "--", "setpriv", f"--reuid={UNPRIVILEGED}",
                f"--regid={UNPRIVILEGED}", "--clear-groups", "--inh-caps=+net_bind_service",
                "--ambient-caps=+net_bind_service", "--", *argv]
    # Unprivileged callers: a user namespace maps them to root inside, still nobody outside.
    return ["unshare", "--user", "--map-root-user", "--net", "--", *argv]


_LOCATED = re.compile(r"^nginx: \[(?P<level>\w+)\] (?P<msg>.*?) in (?P<file>/\S+?):(?P<line>\d+)$")


def _errors(output: str, names: dict[str, str], default: str, prefix: Path) -> list[NginxError]:
    errors = []
    for line in output.splitlines():
        line = line.strip()
        if not line or "test failed" in line:
            continue
        m = _LOCATED.match(line)
        if m and m.group("file") in names:
            errors.append(NginxError(names[m.group("file")],
                                     f"line {m.group('line')}: [{m.group('level')}] {m.group('msg')}"))
        elif "[warn]" not in line:
            errors.append(NginxError(default, line.replace(f"{prefix}/", "")))
    return errors or [NginxError(default, output.strip() or "nginx -t failed")]
