"""Reads container state from the Docker Engine API (podman's compatible API too).

Only what the health gate needs that Compose does not print: a container's address on its
network, whether it runs, its restart count, and its log (the startup log gate). Plain HTTP over the unix socket DOCKER_HOST
names (Compose itself talks to the same socket).
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from urllib.parse import quote

DEFAULT_HOST = "unix:///var/run/docker.sock"
CONFIG_HASH_LABEL = "com.docker.compose.config-hash"


class DockerAPIError(Exception):
    pass


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


@dataclass(frozen=True)
class ContainerState:
    id: str
    running: bool
    restart_count: int
    addresses: tuple[str, ...]  # one per network, in network-name order
    health: str | None  # the container healthcheck's status, None without one


@dataclass(frozen=True)
class DockerAPI:
    host: str = DEFAULT_HOST

    @property
    def socket_path(self) -> str:
        if not self.host.startswith("unix://"):
            raise DockerAPIError(f"DOCKER_HOST={self.host}: only unix:// sockets are supported")
        return self.host[len("unix://"):]

    def request(self, method: str, path: str, timeout_s: float = 30.0) -> tuple[int, bytes]:
        conn = _UnixConnection(self.socket_path, timeout_s)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            return response.status, response.read()
        except OSError as err:
            raise DockerAPIError(f"Docker API at {self.host}: {method} {path}: {err}") from None
        finally:
            conn.close()

    def get_json(self, path: str, timeout_s: float = 30.0):
        status, body = self.request("GET", path, timeout_s)
        if status != 200:
            raise DockerAPIError(f"Docker API at {self.host}: GET {path} answered {status}: {body[:300]!r}")
        return json.loads(body)

    def container_ids(self, project: str, service: str) -> list[str]:
        """Ids of the service's containers (running or not), by Compose's labels."""
        flt = json.dumps({"label": [f"com.docker.compose.project={project}", f"com.docker.compose.service={service}"]})
        return [c["Id"] for c in self.get_json(f"/containers/json?all=true&filters={quote(flt)}")]

    def config_hash(self, container_id: str) -> str:
        """The Compose recreate hash the container was created with ('' without one)."""
        labels = (self.get_json(f"/containers/{quote(container_id)}/json").get("Config") or {}).get("Labels") or {}
        return labels.get(CONFIG_HASH_LABEL, "")

    def image_present(self, reference: str) -> bool:
        status, body = self.request("GET", f"/images/{quote(reference, safe='/:@')}/json")
        if status not in (200, 404):
            raise DockerAPIError(f"Docker API at {self.host}: GET /images/{reference}/json answered {status}: {body[:300]!r}")
        return status == 200

    def logs(self, container_id: str, timeout_s: float = 60.0) -> str:
        """The container's stdout and stderr so far, as text."""
        status, body = self.request("GET", f"/containers/{quote(container_id)}/logs?stdout=true&stderr=true", timeout_s)
        if status != 200:
            raise DockerAPIError(f"Docker API at {self.host}: logs of {container_id[:12]} answered {status}: {body[:300]!r}")
        return demux(body).decode(errors="replace")

    def state(self, container_id: str) -> ContainerState:
        data = self.get_json(f"/containers/{quote(container_id)}/json")
        networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
        state = data.get("State") or {}
        health = state.get("Health") or {}
        return ContainerState(
            id=data["Id"],
            running=bool(state.get("Running")),
            restart_count=int(data.get("RestartCount") or 0),
            addresses=tuple(n["IPAddress"] for _, n in sorted(networks.items()) if n.get("IPAddress")),
            health=health.get("Status") or None,
        )


def demux(body: bytes) -> bytes:
    """The payload of Docker's multiplexed log stream (a container without a TTY): frames of an
    8-byte header (stream 0-2, three zero bytes, big-endian length) and the bytes; anything
    else (a TTY's raw stream) is returned as it is."""
    out, pos = bytearray(), 0
    while pos + 8 <= len(body) and body[pos] in (0, 1, 2) and body[pos + 1:pos + 4] == b"\0\0\0":
        size = int.from_bytes(body[pos + 4:pos + 8], "big")
        out += body[pos + 8:pos + 8 + size]
        pos += 8 + size
    return bytes(out) if pos == len(body) else body
