"""Writes BuildGrid 0.4.4 server configurations: a CAS + action cache, optionally an executor.

Keys follow the schema the 0.4.4 wheel ships (buildgrid/server/app/settings/schema.yml): a
`!channel` with `insecure-mode: false` and `credentials` serves TLS, and its `tls-client-certs`
(the CAs client certificates must chain to) makes the server require a client certificate;
`authorization` with `method: headers` checks the `x-request-actor` header against an ACL file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


# The request header BuildGrid's `headers` authorization reads the caller's identity from.
ACTOR_HEADER = "x-request-actor"


@dataclass(frozen=True)
class ServerTls:
    cert: Path
    key: Path
    client_ca: Path  # client certificates must chain to it; none at all is refused too


@dataclass(frozen=True)
class ServerConfig:
    port: int
    storage_dir: Path
    postgres_url: str | None = None  # set: also serve Execution and Bots (needs PostgreSQL)
    tls: ServerTls | None = None  # set: TLS with a required client certificate
    acl_config: Path | None = None  # set: every request needs an ACTOR_HEADER this ACL allows
    instance: str = ""

    def render(self) -> str:
        lines = [
            "server:",
            "  - !channel",
            f'    address: "127.0.0.1:{self.port}"',
        ]
        if self.tls:
            lines += [
                "    insecure-mode: false",
                "    credentials:",
                f"      tls-server-key: {self.tls.key}",
                f"      tls-server-cert: {self.tls.cert}",
                f"      tls-client-certs: {self.tls.client_ca}",
            ]
        else:
            lines.append("    insecure-mode: true")
        if self.acl_config:
            lines += [
                "authorization:",
                "  method: headers",
                f"  acl-config: {self.acl_config}",
            ]
        lines += [
            "storages:",
            "  - !disk-storage &cas-storage",
            f"    path: {self.storage_dir}",
            "caches:",
            "  - !lru-action-cache &action-cache",
            "    storage: *cas-storage",
            "    max-cached-refs: 100000",
            "    allow-updates: true",
            "    cache-failed-actions: false",
        ]
        if self.postgres_url:
            lines += [
                "connections:",
                "  - !sql-connection &sql",
                f"    connection-string: {self.postgres_url}",
                "    pool-size: 5",
                "    max-overflow: 10",
                "schedulers:",
                "  - !sql-scheduler &scheduler",
                "    sql: *sql",
                "    action-cache: *action-cache",
                "    storage: *cas-storage",
                "    property-set: !dynamic-property-set",
                "      match-property-keys: [OSFamily]",
                "      wildcard-property-keys: [container-image]",
                # Without it a lease held by a dead bot stays assigned and Bazel waits forever.
                "    bot-session-keepalive-timeout: 30",
            ]
        lines += [
            "instances:",
            f'  - name: "{self.instance}"',
            "    services:",
            "      - !action-cache",
            "        cache: *action-cache",
            "      - !cas",
            "        storage: *cas-storage",
            "      - !bytestream",
            "        storage: *cas-storage",
        ]
        if self.postgres_url:
            lines += [
                "      - !execution",
                "        scheduler: *scheduler",
                "      - !bots",
                "        scheduler: *scheduler",
            ]
        # gRPC rejects RPCs beyond this many at once; Bazel opens up to --remote_max_connections.
        lines.append("thread-pool-size: 1024")
        return "\n".join(lines) + "\n"


def actor_acl(instance: str, actor: str) -> str:
    """The ACL file for `acl_config`: only requests whose ACTOR_HEADER is exactly `actor`."""
    # A YAML single-quoted scalar: the regex's backslashes stay literal.
    return f"'{instance}':\n  allow:\n    - actor: '^{re.escape(actor)}$'\n"
