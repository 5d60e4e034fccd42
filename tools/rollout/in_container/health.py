"""Container healthcheck of a rehearsal engine: exit 0 iff GET /health answers 200 within 2 s.

A script, not `python3 -c ...`: podman's Docker API splits a CMD healthcheck's arguments on
spaces.
"""

import sys
import urllib.request

PORT = sys.argv[1] if len(sys.argv) > 1 else "8000"

try:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as response:
        sys.exit(0 if response.status == 200 else 1)
except Exception as err:  # noqa: BLE001  (any failure is "unhealthy")
    print(f"health: {err}")
    sys.exit(1)
