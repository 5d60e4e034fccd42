"""Writes BuildGrid 0.4.4 server configurations: a CAS + action cache, optionally an executor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerConfig:
    port: int
    storage_dir: Path
    postgres_url: str | None = None  # set: also serve Execution and Bots (needs PostgreSQL)

    def render(self) -> str:
        lines = [
            "server:",
            "  - !channel",
            f'    address: "127.0.0.1:{self.port}"',
            "    insecure-mode: true",
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
            '  - name: ""',
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
