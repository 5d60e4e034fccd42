"""One HTTP request from the rollout (engines, the proxy's drain API, the compose manager), with
the answer or the reason there was none; each caller words its own errors."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit


def http_request(url: str, timeout_s: float, token: str | None = None,
                 body: dict | None = None, method: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body); a GET, or a JSON POST with `body` (`method`
    overrides either). Status 0: no answer, with the reason under the header key "error"."""
    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname, parts.port, timeout=timeout_s)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method or ("GET" if body is None else "POST"),
                     (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     body=data, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, payload
    except (OSError, http.client.HTTPException) as err:
        return 0, {"error": str(err) or type(err).__name__}, b""
    finally:
        conn.close()
