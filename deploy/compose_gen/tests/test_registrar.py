"""The registrar script sends its bearer tokens without putting them in any argv.

Runs assets/register.sh with /bin/sh (dash here; the curl image's busybox ash has the same
builtin printf) and a stub `curl` first on PATH that records its arguments, which are exactly
what /proc/<pid>/cmdline shows, and the header files it is handed (`-H @FILE`). Each stub call
also writes a line to a FIFO, so the test waits on calls, never on time.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
from pathlib import Path

from deploy.compose_gen import assets

PEER_TOKEN = "peer-secret-4f1c"
PROXY_TOKEN = "proxy-secret-9a2e"

STUB = """#!/bin/sh
{
  for arg in "$@"; do
    printf 'ARG %s\\n' "$arg"
    case "$arg" in @*) printf 'FILE %s\\n' "$(cat "${arg#@}")" ;; esac
  done
  echo END
} >>"$STUB_LOG"
echo "$*" >"$STUB_FIFO"
case "$*" in *http_code*) printf 200 ;; esac
"""


def _wait_for(fd: int, needle: str) -> None:
    """Reads stub-call lines until one contains `needle` (bounded: 60 s without any call)."""
    buffered = b""
    while needle.encode() not in buffered:
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"no curl call containing {needle!r} within 60 s"
        buffered += os.read(fd, 65536)


def test_tokens_reach_curl_as_header_files_not_arguments(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(STUB)
    (bin_dir / "curl").chmod(0o755)
    script = tmp_path / "register.sh"
    script.write_text(assets.read("register.sh"))
    fifo, log = tmp_path / "calls", tmp_path / "curl.log"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # read-write: never EOF between calls
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_path), "STUB_LOG": str(log),
           "STUB_FIFO": str(fifo), "HOST_IP": "127.0.0.1", "HTTP_PORT": "8000",
           "TLS_PORT": "8444", "MODEL_NAME": "m", "SERVER_NAME": "s.example",
           "MODEL_PROXY_URLS": "https://peer.example", "MODEL_PROXY_TOKEN": PEER_TOKEN,
           "PROXY_TOKEN": PROXY_TOKEN, "REGISTRAR_ALIVE_FILE": str(tmp_path / "alive")}
    proc = subprocess.Popen(["/bin/sh", str(script)], env=env, start_new_session=True,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(fd, "/v1/chat/completions")  # models, register, then the first probe
        proc.send_signal(signal.SIGTERM)
        _wait_for(fd, "/v1/backends/unregister")
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the script's own `sleep` child, if any
        except ProcessLookupError:
            pass
        os.close(fd)
    calls = log.read_text().split("END\n")[:-1]
    args = [line[4:] for call in calls for line in call.splitlines() if line.startswith("ARG ")]
    files = [line[5:] for call in calls for line in call.splitlines() if line.startswith("FILE ")]
    leaked = [name for name, token in (("MODEL_PROXY_TOKEN", PEER_TOKEN),
                                       ("PROXY_TOKEN", PROXY_TOKEN))
              if any(token in a for a in args)]
    assert not leaked, f"in curl's argv: {leaked}"
    by_url = {next(a for a in c.splitlines()[::-1] if a.startswith("ARG ")): c for c in calls}
    for url, token in (("/v1/models", PROXY_TOKEN), ("/v1/backends/register", PEER_TOKEN),
                       ("/v1/chat/completions", PROXY_TOKEN),
                       ("/v1/backends/unregister", PEER_TOKEN)):
        [call] = [c for u, c in by_url.items() if u.endswith(url)]
        assert f"FILE Authorization: Bearer {token}" in call.splitlines(), url
    assert len(files) == len(calls)  # every call authenticates, each with one header file
    header_dirs = {Path(a[1:]).parent for a in args if a.startswith("@")}
    assert all(oct(d.stat().st_mode & 0o777) == "0o700" for d in header_dirs)
