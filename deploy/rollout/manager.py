"""The handover with the host's compose manager: it stops reconciling a service while the
rollout replaces it, and reconciles against the rolled revision afterwards.

On a production host the compose manager is the controller: it deploys a file at a merged tag
with `docker compose up -d --remove-orphans`, and its next pass over the file it deployed last
would put back the old container of a service the rollout just replaced (and the rollout's
`--from` check refuses containers the manager made from another file). So a rollout with
`--manager-url` is a client of the manager's reconcile API:

    POST /reconcile/pause   {"services": [...], "holder": "..."}   200 once no pass is running
                            and none will touch those services until they are resumed
    POST /reconcile/resume  {"services": [...], "revision": "compose/F@REV", "file": "..."}
                            200: the manager reconciles them again, against that revision
    GET  /reconcile/state   {"paused": [...], "revision": "...", "passes": N}

The rehearsal's stand-in manager (deploy/rollout/rehearsal.py, `ManagerStandIn`) implements
it; a real manager needs the same contract (docs/rollout.md, "Compose manager"). The bearer
token, if any, comes from the env file by key and is never printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from deploy.rollout.http_call import http_request

PAUSE, RESUME, STATE = "/reconcile/pause", "/reconcile/resume", "/reconcile/state"


class ManagerError(Exception):
    pass


@dataclass(frozen=True)
class ManagerClient:
    url: str  # the manager's base URL, e.g. http://127.0.0.1:8080
    token: str | None = None
    timeout_s: float = 600.0  # a pause waits for the manager's running pass to end

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        url = self.url.rstrip("/") + path
        where = f"{method} {url}"
        status, headers, data = http_request(url, self.timeout_s, self.token, body, method)
        if status == 0:
            raise ManagerError(f"{where}: {headers['error']}")
        if status != 200:
            raise ManagerError(f"{where} answered {status}: {data[:200].decode(errors='replace').strip()}")
        try:
            return json.loads(data or b"{}")
        except ValueError:
            raise ManagerError(f"{where} answered 200 without JSON") from None

    def pause(self, services: list[str], holder: str) -> dict:
        return self._call("POST", PAUSE, {"services": services, "holder": holder})

    def resume(self, services: list[str], revision: str, file: str | None) -> dict:
        return self._call("POST", RESUME, {"services": services, "revision": revision, "file": file})

    def state(self) -> dict:
        return self._call("GET", STATE)
