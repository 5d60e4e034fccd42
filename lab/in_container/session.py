"""One arm of the lab: the real SGLang server, a /health prober and a client, in one place.

Runs inside the arm's container (or on a host with sglang importable, for development):

1. starts `python3 -m sglang.launch_server --device cpu --skip-server-warmup ...` in its own
   process group, with the fake scheduler plugin (fake_scheduler.py) and
   SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0, and waits (bounded) for /health;
2. starts prober.py as a second process polling /health;
3. sends the named requests one at a time (1 s of quiet before and after each), then
   optionally the flood (new multi-MB conversations at a fixed rate, probes with a 3 s timeout);
4. for multimodal requests, does 1-3 again with the vision model (a second server);
5. stops the prober and each server's whole process group (SIGTERM, bounded wait, SIGKILL),
   removes /dev/shm segments a server left, and writes session.json.

Every server runs with --enable-metrics (unless --no-metrics, or the image has no
prometheus_client, which sglang's metrics need: then session.json says why). Its /metrics is
scraped after the warm-up and after each phase, outside the probed windows; session.json's
"metrics" keeps, per phase, the offload counters before and after it (metrics_text.py) and how
many of its prompts were large (over TOKENIZER_PROCESS_MIN_CHARS characters: v3 encodes each in
its tokenizer child). The raw scrapes go to metrics/<server>.<point>.prom.

    python3 session.py --model DIR [--vision-model DIR] --out DIR --requests chat_4.7MB generate_5MB
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import metrics_text  # noqa: E402
import mixed_plan  # noqa: E402
import workload  # noqa: E402

SHM = Path("/dev/shm")
# The priority the servers and the prober run at whatever --client-nice is: production's.
SERVER_NICE = 0
SETTLE_S = 1.0
FLOOD_PROBE_TIMEOUT_S = 3.0


# The small chat is sent this long after the 5 MB chat, while the 5 MB conversion runs.
PAIR_DELAY_S = 0.3


# name -> (phase, factory). The "vision" phase runs on the vision model's server; a factory
# returns one request, or for a "pair" a (background, foreground) pair sent PAIR_DELAY_S apart.
def _named_requests() -> dict:
    return {
        "chat_4.7MB": ("text", lambda: workload.chat("chat_4.7MB", seed=47, total_bytes=4_700_000)),
        "generate_5MB": ("text", lambda: workload.generate("generate_5MB", seed=50, total_bytes=5_000_000)),
        "chat_1MB": ("text", lambda: workload.chat("chat_1MB", seed=10, total_bytes=1_000_000)),
        # The dispatch delay of a small chat sent while a 5 MB chat is converted.
        "small_chat_during_5MB": ("pair", lambda: (
            workload.chat("chat_5MB_background", seed=55, total_bytes=5_000_000),
            workload.small_chat("small_chat_during_5MB", seed=5))),
        # The Gemma3 processor makes every image a 3 x 896 x 896 float32 feature (9.6 MB) whatever
        # its source size; decoding and resizing cost grows with the source pixels.
        "multimodal_64_images": ("vision", lambda: workload.multimodal_chat(
            "multimodal_64_images", seed=64, images=64, side=64)),
        "multimodal_64x9MP": ("vision", lambda: workload.large_images_chat("multimodal_64x9MP", 69, workload.MP9, 64)),
        "multimodal_16x48MP": ("vision", lambda: workload.large_images_chat("multimodal_16x48MP", 48, workload.MP48, 16)),
    }


REQUEST_NAMES = sorted(_named_requests())
# One multimodal processor worker: sglang then runs the processor inline on the event loop
# (mm_processor_executor is None), the path GPU hosts take with the fast image processor.
VISION_SERVER_ARGS = ["--enable-multimodal", "--image-processor-backend", "pil", "--mm-processor-worker-num", "1"]


class SessionError(Exception):
    """The server or the client failed in a way that invalidates the run."""


@dataclass
class Sent:
    name: str
    path: str
    body_bytes: int
    body_sha256: str
    kind: str = "request"
    sent: float = 0.0  # monotonic seconds
    done: float = 0.0
    status: int = 0
    prompt_tokens: int | None = None
    error: str | None = None
    probe_file: str = "probes.jsonl"
    prompt_chars: int | None = None  # workload.prompt_chars of the body
    images: int = 0  # image parts in the body


@dataclass
class Report:
    server_commands: list[list[str]] = field(default_factory=list)
    server_ready_s: list[float] = field(default_factory=list)
    client_nice: int = 0
    # Each server's process priority as read from /proc once it answered /health.
    server_nice: list[int] = field(default_factory=list)
    requests: list[Sent] = field(default_factory=list)
    flood: dict | None = None
    mixed: dict | None = None
    profiles: list[dict] = field(default_factory=list)
    shm_before: list[str] = field(default_factory=list)
    shm_after: list[str] = field(default_factory=list)
    shm_removed: list[str] = field(default_factory=list)
    leftover_pids: list[int] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    error: str | None = None


def _post(port: int, req: "workload.Request", timeout_s: float) -> tuple[int, dict | None, str | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", req.path, body=req.body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        try:
            answer = json.loads(data)
        except ValueError:
            return response.status, None, f"non-JSON answer: {data[:300]!r}"
        return response.status, answer, None if response.status == 200 else f"HTTP {response.status}: {data[:300]!r}"
    except (OSError, http.client.HTTPException) as err:
        return 0, None, f"{type(err).__name__}: {err}"
    finally:
        conn.close()


def send(port: int, req: "workload.Request", timeout_s: float, kind: str = "request") -> Sent:
    record = Sent(req.name, req.path, len(req.body), hashlib.sha256(req.body).hexdigest(), kind)
    record.prompt_chars = req.prompt_chars  # cached: the callers computed it before the quiet period
    record.images = req.images
    record.sent = time.monotonic()
    record.status, answer, record.error = _post(port, req, timeout_s)
    record.done = time.monotonic()
    if answer is not None and record.error is None:
        try:
            record.prompt_tokens = req.prompt_tokens(answer)
        except (KeyError, TypeError, ValueError) as err:
            record.error = f"no prompt_tokens in the answer ({err!r}): {json.dumps(answer)[:300]}"
    return record


class Server:
    """The real sglang HTTP server, in its own process group."""

    def __init__(self, model: Path, port: int, out: Path, extra_args: list[str], name: str = "server",
                 sample_threads_ms: float = 0.0) -> None:
        self.port = port
        self.command = [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", str(model),
            "--device", "cpu",
            "--skip-server-warmup",
            "--host", "127.0.0.1",
            "--port", str(port),
            # Access-log lines for every probe would add I/O on the loop being measured.
            "--uvicorn-access-log-exclude-prefixes", "/health",
            *extra_args,
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        env["SGLANG_PLUGINS"] = "lab_fake_scheduler,lab_gc_timeline,lab_loop_sampler"
        env["LAB_GC_TIMELINE"] = str(out / f"{name}.gc.jsonl")
        if sample_threads_ms > 0:
            env["LAB_LOOP_SAMPLES"] = str(out / f"{name}.loop.jsonl")
            env["LAB_LOOP_SAMPLE_MS"] = str(sample_threads_ms)
        env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "0"
        # With --enable-metrics sglang makes its own multiprocess directory and sets this; one
        # inherited would be shared by both servers of the session (their counters mixed).
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env["LAB_FAKE_SCHEDULER_LOG"] = str(out / f"{name}.scheduler.jsonl")
        # The images carry no lscpu (util-linux), which sglang's --device cpu memory probe runs
        # (get_cpu_memory_capacity -> parse_lscpu_topology). A thread binding makes it skip the
        # probe; only the real scheduler reads the binding, and the fake one binds nothing.
        env.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "all")
        self.log_path = out / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.proc = spawn_at_server_priority(
            "server", self.command, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        self.pids: set[int] = {self.proc.pid}

    def group_pids(self) -> set[int]:
        pids = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.pgid:
                        pids.add(int(entry.name))
                except OSError:
                    continue
        return pids

    def wait_ready(self, timeout_s: float) -> float:
        log = self.log_path
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.proc.poll() is not None:
                raise SessionError(f"the server exited with {self.proc.returncode} before /health answered; see {log}")
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    self.pids |= self.group_pids()
                    return time.monotonic() - start
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()
            time.sleep(0.5)
        raise SessionError(f"/health did not answer 200 within {timeout_s:.0f} s; see {log}")

    def stop(self, grace_s: float = 5.0) -> list[int]:
        """Stops the whole group; returns pids of the group still alive afterwards (none)."""
        self.pids |= self.group_pids()
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and (self.proc.poll() is None or self.group_pids()):
                time.sleep(0.1)
            if self.proc.poll() is not None and not self.group_pids():
                break
        self._log.close()
        return sorted(self.group_pids())


def _server_priority() -> None:
    """In the forked child, before exec: back to SERVER_NICE from the session's --client-nice."""
    os.setpriority(os.PRIO_PROCESS, 0, SERVER_NICE)


def spawn_at_server_priority(what: str, command: list[str], **popen) -> subprocess.Popen:
    try:
        return subprocess.Popen(command, preexec_fn=_server_priority, **popen)
    except (subprocess.SubprocessError, PermissionError) as err:
        raise SessionError(
            f"cannot start the {what} at nice {SERVER_NICE}"
            f" from this session's nice {os.getpriority(os.PRIO_PROCESS, 0)} ({err}): raising a priority needs"
            " CAP_SYS_NICE (health_stall's containers have it); elsewhere run with --client-nice 0") from None


def process_nice(pid: int) -> int:
    """The nice value of a process (field 19 of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])


class Prober:
    """prober.py on the server's port; it reads the server's loop thread's schedstat (loop_pid:
    the server process, whose main thread runs uvicorn's event loop) around each probe."""

    def __init__(self, port: int, interval_ms: float, timeout_s: float, out: Path, loop_pid: int) -> None:
        self.proc = spawn_at_server_priority(
            "prober", [sys.executable, str(HERE / "prober.py"), "--port", str(port), "--interval-ms", str(interval_ms),
             "--timeout-s", str(timeout_s), "--out", str(out), "--loop-pid", str(loop_pid)],
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5 + FLOOD_PROBE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


class Profiler:
    """py-spy recording which Python thread of the server process holds the GIL (chrometrace: a
    timestamp per sample).

    The host lines samples up with slow probes (lab/attribution.py). Sample timestamps count
    from py-spy's start, taken here as `launched` (CLOCK_MONOTONIC, as the probes); measured
    against a marked spin, the offset is under one sample period plus a few ms.
    """

    def __init__(self, py_spy: Path, pid: int, rate_hz: int, out: Path, native: bool = False) -> None:
        self.out = out
        self.log_path = out.with_suffix(".log")
        self._log = self.log_path.open("ab")
        self.launched = time.monotonic()
        if native:
            # Every thread in every sample, idle ones too, with its C frames: a thread in
            # take_gil waits for the GIL, the one that is not holds it. py-spy stops the
            # process to unwind it (no --nonblocking), which slows the server a little.
            mode = ["--native", "--idle"]
        else:
            # --gil: each sample is the thread holding the GIL, so a slow probe is attributed
            # to what held it, not to every thread that was waiting for it.
            mode = ["--gil", "--nonblocking"]
        self.proc = subprocess.Popen(
            [str(py_spy), "record", "--pid", str(pid), "--rate", str(rate_hz), "--format", "chrometrace",
             "--threads", *mode, "--output", str(out)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )
        self.record = {"file": out.name, "log": self.log_path.name, "pid": pid, "rate_hz": rate_hz,
                       "launched": self.launched, "native": native}

    def stop(self) -> dict:
        """SIGINT makes py-spy write its output; the record says whether it did."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        self.record.update({"stopped": time.monotonic(), "exit": self.proc.returncode, "written": self.out.is_file()})
        return self.record


def _shm_entries() -> list[str]:
    try:
        return sorted(p.name for p in SHM.iterdir())
    except OSError:
        return []


def _remove_server_shm(before: list[str], pids: set[int]) -> list[str]:
    """Unlinks sglang segments (sgl_shm_<kind>_<pid>_<rand>) the server's processes left."""
    removed = []
    for name in sorted(set(_shm_entries()) - set(before)):
        parts = name.split("_")
        if name.startswith("sgl_shm_") and len(parts) >= 4 and parts[3].isdigit() and int(parts[3]) in pids:
            try:
                (SHM / name).unlink()
                removed.append(name)
            except OSError:
                pass
    return removed


def send_pair(port: int, background: "workload.Request", foreground: "workload.Request",
              timeout_s: float) -> list[Sent]:
    """Sends `background`, then `foreground` PAIR_DELAY_S later, while the first is in flight."""
    done: list[Sent] = []
    thread = threading.Thread(target=lambda: done.append(send(port, background, timeout_s, "background")))
    thread.start()
    time.sleep(PAIR_DELAY_S)
    small = send(port, foreground, timeout_s, "small")
    thread.join(timeout_s + 5)
    return [*done, small] if done else [small]


def run_requests(port: int, names: list[str], timeout_s: float, probe_file: str) -> list[Sent]:
    factories = _named_requests()
    sent = []
    for name in names:
        phase, factory = factories[name]
        made = factory()  # built before the quiet period, so building is not measured
        for req in made if isinstance(made, tuple) else (made,):
            req.prompt_chars  # noqa: B018  (parsed now, not in the measured window)
        time.sleep(SETTLE_S)
        records = send_pair(port, *made, timeout_s) if phase == "pair" else [send(port, made, timeout_s)]
        for record in records:
            record.probe_file = probe_file
            print(f"session: {record.name}: HTTP {record.status} in {record.done - record.sent:.2f} s,"
                  f" prompt_tokens={record.prompt_tokens} {record.error or ''}", flush=True)
        sent += records
        time.sleep(SETTLE_S)
    return sent


def flood_bodies(minutes: float, rps: float, body_bytes: int) -> list["workload.Request"]:
    """The flood's conversations, each new (its own seed); made before any probing starts."""
    count = max(1, int(minutes * 60 * rps))
    bodies = [workload.conversation(f"flood_{i}", seed=1000 + i, total_bytes=body_bytes) for i in range(count)]
    for body in bodies:
        body.prompt_chars  # noqa: B018  (parsed now, before any probing)
    return bodies


def send_open_loop(port: int, plan: list["mixed_plan.Planned"], timeout_s: float) -> tuple[float, float, list[dict]]:
    """Sends each planned request at its offset (open loop: a slow server does not slow the sender).

    Returns (start, end, one record per planned request); a request still unanswered after
    `timeout_s` is recorded as "still running".
    """
    results: list[Sent | None] = [None] * len(plan)
    for item in plan:
        item.request.prompt_chars  # noqa: B018  (the callers parsed them before probing: cached)

    def worker(index: int) -> None:
        results[index] = send(port, plan[index].request, timeout_s, plan[index].kind)

    threads = []
    start = time.monotonic()
    for index, item in enumerate(plan):
        delay = start + item.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        thread = threading.Thread(target=worker, args=(index,), daemon=True)
        thread.start()
        threads.append(thread)
    for item, thread in zip(plan, threads):
        # each request's own bound: its send offset plus the HTTP timeout (send() gives up then)
        thread.join(timeout=max(0.0, start + item.at + timeout_s + 5 - time.monotonic()))
    end = time.monotonic()
    records = [asdict(r) if r else {"name": plan[i].request.name, "kind": plan[i].kind, "error": "still running",
                                    "body_bytes": len(plan[i].request.body),
                                    "prompt_chars": plan[i].request.prompt_chars, "images": plan[i].request.images}
               for i, r in enumerate(results)]
    return start, end, records


def run_flood(port: int, bodies: list["workload.Request"], minutes: float, rps: float, body_bytes: int,
              timeout_s: float) -> dict:
    """Sends `bodies` at a fixed rate."""
    plan = [mixed_plan.Planned(index / rps, "flood", body) for index, body in enumerate(bodies)]
    start, end, records = send_open_loop(port, plan, timeout_s)
    return {"start": start, "end": end, "rps": rps, "minutes": minutes, "body_bytes": body_bytes, "requests": records}


LARGE_BODY_BYTES = 1 << 20  # v3 parses a body of more than 1 MiB in its JSON process


def phase_counts(records: list) -> dict:
    """How many requests a phase sent, how many had a large prompt, a large body, images."""
    rows = [asdict(r) if isinstance(r, Sent) else r for r in records]
    return {
        "requests": len(rows),
        "large_prompts": sum(1 for r in rows if (r.get("prompt_chars") or 0) > workload.TOKENIZER_PROCESS_MIN_CHARS),
        "large_bodies": sum(1 for r in rows if (r.get("body_bytes") or 0) > LARGE_BODY_BYTES),
        "image_requests": sum(1 for r in rows if (r.get("images") or 0) > 0),
    }


def metrics_mode(no_metrics: bool) -> tuple[bool, str | None]:
    """(start the servers with --enable-metrics, why not)."""
    if no_metrics:
        return False, "--no-metrics"
    if importlib.util.find_spec("prometheus_client") is None:
        return False, "prometheus_client is not importable in this image (sglang's --enable-metrics imports it)"
    return True, None


def warm_up(port: int, phase: str) -> None:
    """Small unmeasured requests: first-use imports, template compiles, worker pools."""
    if phase == "vision":
        reqs = [workload.multimodal_chat("warmup_vision", seed=3, images=1, side=32)]
    else:
        reqs = [workload.chat("warmup_chat", seed=1, total_bytes=2000),
                workload.generate("warmup_generate", seed=2, total_bytes=2000)]
    for req in reqs:
        record = send(port, req, timeout_s=120)
        if record.error:
            raise SessionError(f"warm-up {req.name} failed: {record.error}")


class Session:
    """Runs the phases in order and always stops what it started."""

    def __init__(self, args: argparse.Namespace, report: Report) -> None:
        self.args = args
        self.report = report
        self.server: Server | None = None
        self.prober: Prober | None = None
        self.profiler: Profiler | None = None
        self.server_pids: set[int] = set()
        self.metrics_on, reason = metrics_mode(args.no_metrics)
        report.metrics = {"enabled": self.metrics_on, "reason": reason,
                          "large_prompt_chars": workload.TOKENIZER_PROCESS_MIN_CHARS,
                          "large_body_bytes": LARGE_BODY_BYTES, "phases": []}

    def start_server(self, model: Path, extra: list[str], name: str) -> None:
        metrics = ["--enable-metrics"] if self.metrics_on else []
        self.server = Server(model, self.args.port, self.args.out, [*extra, *metrics, *self.args.server_arg], name,
                             self.args.sample_threads_ms)
        self.report.server_commands.append(self.server.command)
        ready = self.server.wait_ready(self.args.server_timeout_s)
        self.report.server_ready_s.append(round(ready, 1))
        nice = process_nice(self.server.proc.pid)
        self.report.server_nice.append(nice)
        if nice != SERVER_NICE:
            raise SessionError(f"{name} runs at nice {nice}, not {SERVER_NICE}: the measurement would not be"
                               " production's")
        print(f"session: {name} ready after {ready:.1f} s", flush=True)

    def start_profiler(self, name: str) -> None:
        """Samples the HTTP server process (its event loop and worker threads), if --py-spy."""
        if self.args.py_spy is not None and self.server is not None:
            self.profiler = Profiler(self.args.py_spy, self.server.proc.pid, self.args.profile_rate_hz,
                                     self.args.out / f"{name}.pyspy.json", self.args.profile_native)

    def stop_profiler(self) -> None:
        if self.profiler is not None:
            record = self.profiler.stop()
            self.report.profiles.append(record)
            self.profiler = None
            if not record["written"]:
                raise SessionError(f"py-spy wrote no {record['file']} (exit {record['exit']}); see {record['log']}")

    def start_prober(self, timeout_s: float, file_name: str) -> None:
        self.prober = Prober(self.args.port, self.args.interval_ms, timeout_s, self.args.out / file_name,
                             self.server.proc.pid)
        nice = process_nice(self.prober.proc.pid)  # set before exec, so already final here
        if nice != SERVER_NICE:
            raise SessionError(f"the prober runs at nice {nice}, not {SERVER_NICE}: it would report its own delay")

    def stop_prober(self) -> None:
        if self.prober is not None:
            self.prober.stop()
            self.prober = None

    def scrape(self, server: str, point: str) -> dict:
        """The server's offload counters now (None when it exports none), and the raw scrape."""
        record: dict = {"point": point, "at": time.monotonic(), "status": None, "error": None, "offload": None,
                        "file": None}
        if not self.metrics_on:
            record["error"] = "metrics off: " + str(self.report.metrics["reason"])
            return record
        record["status"], text, record["error"] = metrics_text.scrape(self.args.port)
        if record["status"] == 200:
            path = self.args.out / "metrics" / f"{server}.{point}.prom"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            record["file"] = str(path.relative_to(self.args.out))
            try:
                record["offload"] = metrics_text.offload_counters(metrics_text.parse(text))
            except metrics_text.MetricsParseError as err:
                record["error"] = f"/metrics: {err}"
        return record

    def record_phase(self, phase: str, server: str, records: list, before: dict) -> dict:
        """Scrapes after `phase` and keeps both ends in session.json; returns the new scrape."""
        after = self.scrape(server, phase)
        entry = {"phase": phase, "server": server, **phase_counts(records), "before": before, "after": after}
        self.report.metrics["phases"].append(entry)
        events = (after.get("offload") or {}).get("events")
        print(f"session: {phase}: {entry['large_prompts']} large prompts of {entry['requests']};"
              f" offload counters {events if events is not None else 'absent'}"
              + (f" ({after['error']})" if after.get("error") else ""), flush=True)
        return after

    def stop_server(self) -> None:
        if self.server is not None:
            self.report.leftover_pids += self.server.stop()
            self.server_pids |= self.server.pids
            self.server = None

    def run(self) -> None:
        args, report = self.args, self.report
        phases = {name: _named_requests()[name][0] for name in args.requests}
        text = [name for name in args.requests if phases[name] in ("text", "pair")]
        vision = [name for name in args.requests if phases[name] == "vision"]
        if text or args.flood_minutes > 0:
            self.start_server(args.model, [], "server")
            warm_up(args.port, "text")
            self.start_profiler("server")
            last = self.scrape("server", "start")
            if text:
                self.start_prober(60.0, "probes.jsonl")
                sent = run_requests(args.port, text, args.request_timeout_s, "probes.jsonl")
                report.requests += sent
                self.stop_prober()
                last = self.record_phase("text", "server", sent, last)
            if args.flood_minutes > 0:
                bodies = flood_bodies(args.flood_minutes, args.flood_rps, args.flood_bytes)
                self.start_prober(FLOOD_PROBE_TIMEOUT_S, "flood_probes.jsonl")
                time.sleep(5.0)  # a baseline before the flood
                report.flood = run_flood(args.port, bodies, args.flood_minutes, args.flood_rps, args.flood_bytes,
                                         args.request_timeout_s)
                time.sleep(SETTLE_S)
                self.stop_prober()
                last = self.record_phase("flood", "server", report.flood["requests"], last)
            self.stop_profiler()
            self.stop_server()
        if vision or args.mixed_minutes > 0:
            if args.vision_model is None:
                raise SessionError("the vision requests and the mixed phase need --vision-model")
            self.start_server(args.vision_model, VISION_SERVER_ARGS, "vision-server")
            warm_up(args.port, "vision")
            self.start_profiler("vision-server")
            last = self.scrape("vision-server", "start")
            if vision:
                self.start_prober(60.0, "vision_probes.jsonl")
                sent = run_requests(args.port, vision, args.request_timeout_s, "vision_probes.jsonl")
                report.requests += sent
                self.stop_prober()
                last = self.record_phase("vision", "vision-server", sent, last)
            if args.mixed_minutes > 0:
                plan = mixed_plan.mixed_plan(mixed_plan.MixedShape(minutes=args.mixed_minutes))  # before probing
                for item in plan:
                    item.request.prompt_chars  # noqa: B018
                self.start_prober(60.0, "mixed_probes.jsonl")
                time.sleep(SETTLE_S)
                start, end, records = send_open_loop(args.port, plan, args.request_timeout_s)
                report.mixed = {"start": start, "end": end, "minutes": args.mixed_minutes,
                                "probe_file": "mixed_probes.jsonl", "scheduler_log": "vision-server.scheduler.jsonl",
                                "server_log": "vision-server.log", "requests": records}
                time.sleep(SETTLE_S)
                self.stop_prober()
                self.record_phase("mixed", "vision-server", records, last)
                failed = sum(1 for r in records if r.get("error"))
                print(f"session: mixed traffic: {len(records)} requests, {failed} failed", flush=True)
            self.stop_profiler()
            self.stop_server()

    def close(self) -> None:
        self.stop_prober()
        if self.profiler is not None:
            self.report.profiles.append(self.profiler.stop())
            self.profiler = None
        self.stop_server()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="text model directory (model_dir.py --text)")
    parser.add_argument("--vision-model", type=Path, help="vision model directory (model_dir.py --vision)")
    parser.add_argument("--out", type=Path, required=True, help="writable directory for logs and session.json")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--requests", nargs="*", default=[], choices=REQUEST_NAMES, help="sent one at a time")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="probe period (default: 10)")
    parser.add_argument("--request-timeout-s", type=float, default=180.0)
    parser.add_argument("--server-timeout-s", type=float, default=300.0, help="bound on server start-up")
    parser.add_argument("--flood-minutes", type=float, default=0.0, help="0: no flood")
    parser.add_argument("--flood-rps", type=float, default=0.5)
    parser.add_argument("--flood-bytes", type=int, default=3_000_000)
    parser.add_argument("--mixed-minutes", type=float, default=0.0, help="mixed-traffic phase length (0: none)")
    parser.add_argument("--py-spy", type=Path, help="py-spy binary: sample the server to attribute slow probes")
    parser.add_argument("--profile-rate-hz", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--profile-native", action="store_true",
                        help="py-spy samples every thread with its C frames (--native --idle) instead of --gil")
    parser.add_argument("--sample-threads-ms", type=float, default=0.0,
                        help="the server's own thread sampler (loop_sampler.py) at this period (0: off)")
    parser.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument")
    parser.add_argument("--no-metrics", action="store_true",
                        help="start the servers without --enable-metrics (no offload counters)")
    parser.add_argument("--client-nice", type=int, choices=range(0, 20), default=0, metavar="0-19",
                        help="this process's priority (its client work and py-spy); the servers and the"
                             " prober run at 0 (default: 0)")
    args = parser.parse_args(argv)

    # Threads and processes started from here on inherit it; _server_priority undoes it for
    # the servers and the prober.
    os.setpriority(os.PRIO_PROCESS, 0, args.client_nice)
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(client_nice=args.client_nice)
    report.shm_before = _shm_entries()
    session = Session(args, report)
    try:
        session.run()
    except SessionError as err:
        report.error = str(err)
        print(f"session: error: {err}", file=sys.stderr, flush=True)
    finally:
        session.close()
        report.shm_removed = _remove_server_shm(report.shm_before, session.server_pids)
        report.shm_after = _shm_entries()
        (args.out / "session.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    return 1 if report.error or report.leftover_pids else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
