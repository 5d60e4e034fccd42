"""Reproduces the /health stall on CPU: the real SGLang server, one image per arm, measured.

    bazel run //lab:health_stall -- [--quick] [--arms stock,upstream,v3,v4] [--out DIR] [--interval-ms 10]

For each arm (an image label: stock = the 0.5.19 CPU base, upstream = the 0.5.23 CPU base,
v3 = //recipes:glm53_v3, v4 = //recipes:glm53_v4) one podman container with no network runs
lab/in_container/session.py: the real `python3 -m sglang.launch_server` with a fake scheduler
plugin, a /health prober process (every 10 ms by default), py-spy sampling the server, and a
client sending seeded synthetic requests one at a time, optionally a flood of new multi-MB
conversations (--flood-minutes), then a mixed-traffic phase (tool chats, small chats, image chats and large
image requests at once) on the vision server with the inline multimodal processor. A first
short container writes the tiny model directories every arm then mounts read-only, with the
GLM-class tokenizer (patches/v3/tests/glm_tokenizer.py: 151,552 tokens, backend JSON 5.2 MiB)
by default, or --tokenizer small (the 8,000-token BPE of the runs before it).

Every server runs with --enable-metrics; its /metrics is scraped after each phase, and the v3
engine's offload counters (sglang:offload_events_total{path,event}) go into results.json
("offload": per arm and phase, the counters' deltas) and the report.

Writes to --out: results.json ({"requests": [...]}, the agreed shape, plus "tokenizer",
"offload" and "worst_probes": the slowest probes split into the server loop thread's runqueue
wait and the remainder), results.md (tables),
health-stall.png, flood.json / flood.png, mixed.json / mixed.png, dispatch.json,
attribution.json (the code that ran during every probe over 20 ms), run.json (images,
commands, clean-up facts) and arms/<arm>/ (raw probes, profiles, logs).

--quick: the ~4.7 MB chat and the 5 MB /generate, no mixed phase (a few minutes).
--check: exit 1 unless the quick rule holds (v3 worst < 250 ms, stock worst > 1,000 ms,
identical prompt_tokens; on v3 every large prompt encoded by the tokenizer child, by its
counters). --check-v3: v3's half of that rule, for a run of the v3 arm alone (`--arms v3`:
v3's worst probe and its counters; nothing compared with stock). --same-image runs the stock
image in the v3 arm too, to see the check fail.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from lab import attribution, checks, offload, report, results, traffic
from lab.container import Container, ContainerError, Podman
from tools.oci.ocilayout import LayoutError, find_layout, parse_blob_args, read_layout
from tools.podman.spec import Mount, default_cache_root

IN_CONTAINER = Path(__file__).resolve().parent / "in_container"
# The fake scheduler, the model directories and the /metrics parser, shared with the rollout
# rehearsal (a data dependency of the binary: //tools/sglang_server:in_container): staged into the
# same directory, so the in-container modules import one another by name.
SGLANG_SERVER_FILES = Path(__file__).resolve().parent.parent / "tools" / "sglang_server" / "in_container"
# Staged beside the in_container files (a data dependency of the binary: //patches:v3/tests/...),
# so model_dir.py imports it in every arm's image, not only in v3's, which also carries it.
GLM_TOKENIZER = Path("patches/v3/tests/glm_tokenizer.py")
TOKENIZERS = ("glm", "small")  # model_dir.py TOKENIZERS; glm is the default
BASELINE = "stock"  # the arm whose prompts the others are compared with
FULL_REQUESTS = ["chat_4.7MB", "generate_5MB", "small_chat_during_5MB", "multimodal_64x9MP", "multimodal_16x48MP"]
LAB_DIR, MODEL_DIR, VISION_MODEL_DIR, OUT_DIR = "/lab", "/model", "/vision-model", "/out"
TOOLS_DIR = "/lab-tools"
# Probe files and the server whose profile covers them.
PROBE_FILES = {"probes.jsonl": "server", "flood_probes.jsonl": "server",
               "vision_probes.jsonl": "vision-server", "mixed_probes.jsonl": "vision-server"}


class UsageError(Exception):
    pass


class _Interrupted(Exception):
    pass


def _interrupt(signum, frame) -> None:
    raise _Interrupted(f"signal {signum}")


def glm_tokenizer_file() -> Path:
    """patches/v3/tests/glm_tokenizer.py among the runfiles (else beside the resolved sources)."""
    here = Path(__file__)
    candidates = [base / GLM_TOKENIZER for base in (here.absolute().parent.parent, here.resolve().parent.parent)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise UsageError(f"{GLM_TOKENIZER} not found (looked at {[str(c) for c in candidates]});"
                     " is it in the binary's data?")


def _stage_lab_files(dest: Path) -> Path:
    """Copies lab/in_container, tools/sglang_server/in_container and glm_tokenizer.py
    (dereferencing Bazel's runfiles symlinks) into one directory for a read-only mount."""
    for source in (IN_CONTAINER, SGLANG_SERVER_FILES):
        shutil.copytree(source, dest, symlinks=False, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(glm_tokenizer_file(), dest / GLM_TOKENIZER.name)
    return dest


def models_match(models: Path, tokenizer: str) -> bool:
    """Whether a previous run's model directories in --out have this tokenizer (else remade)."""
    for model in ("text", "vision"):
        try:
            if json.loads((models / model / results.TOKENIZER_MANIFEST).read_text())["name"] != tokenizer:
                return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
    return (models / "vision" / "processor_config.json").is_file()


def _shm_entries() -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").iterdir())


def _resolve_out(value: str | None) -> Path:
    base = Path(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd())
    if value is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        return base / "lab-out" / f"health-stall-{stamp}"
    path = Path(value)
    return path if path.is_absolute() else base / path


def _images(args: argparse.Namespace) -> dict[str, object]:
    """arm -> image, in the order of --arms (default: every arm given an image, sorted)."""
    blobs = parse_blob_args(args.blob)
    given: dict[str, list[Path]] = {}
    for item in args.image:
        arm, sep, layout = item.partition("=")
        if not sep or not arm:
            raise UsageError(f"--image {item!r}: expected ARM=LAYOUT, e.g. stock=path/to/layout")
        given.setdefault(arm, []).append(Path(layout))
    if args.same_image:
        if "stock" not in given:
            raise UsageError("--same-image needs a stock image")
        given["v3"] = given["stock"]
    arms = [a for a in args.arms.split(",") if a] if args.arms else sorted(given)
    missing = [arm for arm in arms if arm not in given]
    if missing:
        raise UsageError(f"--arms {args.arms}: no image for arm(s) {missing}; images exist for {sorted(given)}"
                         " (bazel run passes one --image ARM=LAYOUT per image of the lab_runner target)")
    if len(set(arms)) != len(arms) or not arms:
        raise UsageError(f"--arms {args.arms!r}: name each arm once, comma-separated")
    return {arm: read_layout(find_layout(given[arm]), blobs, require_blobs=True) for arm in arms}


def find_py_spy(explicit: Path | None) -> Path:
    """The py-spy binary: --py-spy, else the locked wheel's script among the runfiles' site dirs."""
    if explicit is not None:
        if not explicit.is_file():
            raise UsageError(f"--py-spy {explicit}: no such file")
        return explicit
    for entry in sys.path:
        for candidate in sorted(Path(entry).glob("py_spy-*.data/scripts/py-spy")) if Path(entry).is_dir() else []:
            return candidate
    raise UsageError("py-spy not found in the runfiles (py-spy in third_party/python/tools.in, relocked?);"
                     " pass --py-spy PATH or --no-profile")


# What every container gets; --server-env may not replace it.
CONTAINER_ENV = {"PYTHONUNBUFFERED": "1"}
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def parse_server_env(items: list[str]) -> dict[str, str]:
    """--server-env NAME=VALUE items as a mapping; SystemExit naming the item that is not one."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise SystemExit(f"health_stall: --server-env {item!r}: expected NAME=VALUE with NAME "
                             "in capitals, digits and underscores (e.g. SGLANG_MM_PROCESSES=1)")
        if name in CONTAINER_ENV or name in env:
            raise SystemExit(f"health_stall: --server-env {name} given twice or set by the lab itself "
                             f"({', '.join(CONTAINER_ENV)})")
        env[name] = value
    return env


class Lab:
    def __init__(self, podman: Podman, out: Path, run_label: str, server_env: dict[str, str]) -> None:
        self.podman = podman
        self.out = out
        self.run_label = run_label
        self.env = {**CONTAINER_ENV, **server_env}
        self.live: list[Container] = []
        self.removed: list[str] = []

    def run_container(self, image_id: str, arm: str, command: list[str], mounts: list[Mount],
                      timeout_s: float, log: Path) -> int:
        name = f"{self.run_label}-{arm}"
        container = self.podman.start(image_id, name, self.run_label, command, mounts, env=self.env)
        self.live.append(container)
        try:
            code = self.podman.wait(container, timeout_s)
        finally:
            log.write_text(self.podman.logs(container))
            self.remove(container)
        if code is None:
            raise ContainerError(f"{name} still ran after {timeout_s:.0f} s (killed); see {log}")
        return code

    def remove(self, container: Container) -> None:
        self.podman.remove(container)
        self.live.remove(container)
        self.removed.append(container.id)

    def remove_all(self) -> None:
        for container in list(self.live):
            try:
                self.remove(container)
            except ContainerError as err:
                print(f"health_stall: clean-up: {err}", file=sys.stderr)


def session_command(args: argparse.Namespace, requests: list[str]) -> list[str]:
    command = [
        "python3", f"{LAB_DIR}/session.py", "--model", MODEL_DIR, "--vision-model", VISION_MODEL_DIR,
        "--out", OUT_DIR,
        "--interval-ms", str(args.interval_ms), "--client-nice", str(args.client_nice),
    ]
    if requests:
        command += ["--requests", *requests]
    if args.flood_minutes > 0:
        command += ["--flood-minutes", str(args.flood_minutes), "--flood-rps", str(args.flood_rps),
                    "--flood-bytes", str(args.flood_bytes)]
    if args.mixed_minutes > 0:
        command += ["--mixed-minutes", str(args.mixed_minutes)]
    if not args.no_profile:
        command += ["--py-spy", f"{TOOLS_DIR}/py-spy", "--profile-rate-hz", str(args.profile_rate_hz)]
        if args.profile_native:
            command += ["--profile-native"]
    if args.sample_threads_ms > 0:
        command += ["--sample-threads-ms", str(args.sample_threads_ms)]
    if args.no_metrics:
        command += ["--no-metrics"]
    return command


def attribute_arm(arm_dir: Path) -> dict:
    """probe file -> attribution summary of its probes over 20 ms (from the server's py-spy profile)."""
    session = results.load_session(arm_dir)
    profiles = {Path(p["file"]).name.split(".")[0]: p for p in session.get("profiles", [])}
    out = {}
    for probe_file, server in PROBE_FILES.items():
        if not (arm_dir / probe_file).is_file():
            continue
        profile = profiles.get(server)
        probes = results.load_probes(arm_dir / probe_file)
        pauses = attribution.load_gc_pauses(arm_dir / f"{server}.gc.jsonl")
        spans = [] if profile is None else attribution.load_trace(arm_dir / profile["file"], profile["launched"])
        slow = attribution.attribute(probes, sorted(spans + pauses, key=lambda span: span.start))
        behind = attribution.sampler_behind_s(arm_dir / profile["log"]) if profile else None
        samples = attribution.load_cpu_samples(arm_dir / f"{server}.loop.jsonl")
        out[probe_file] = attribution.summary(slow, samples=samples) | {"profiled": profile is not None, "sampler_behind_max_s": behind,
                                                       "native": bool(profile and profile.get("native")),
                                                       "gc": attribution.gc_summary(pauses)}
    return out


def write_outputs(args: argparse.Namespace, out: Path, requests: list[str], arms: tuple[str, ...]) -> dict:
    arm_dirs = {arm: out / "arms" / arm for arm in arms}
    per_arm = {arm: results.arm_request_stats(arm_dirs[arm]) for arm in arms}
    summary = results.combine(per_arm, arms) if requests else {"requests": []}
    tokenizer = results.load_tokenizers(out / "models")
    if tokenizer:
        summary["tokenizer"] = tokenizer
    summary["offload"] = {arm: offload.arm_offload(results.load_session(arm_dirs[arm])) for arm in arms}
    summary["worst_probes"] = {arm: results.arm_worst_probes(arm_dirs[arm]) for arm in arms}
    results.validate(summary, arms)
    (out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    table = report.markdown_table(summary, arms) if requests else ""
    interval = f"{args.interval_ms:g} ms"
    if requests:
        probes, windows = {}, {}
        for arm in arms:
            session = results.load_session(arm_dirs[arm])
            probes[arm] = results.arm_probes(arm_dirs[arm])
            windows[arm] = [(r["name"], r["sent"], r["done"]) for r in session["requests"]]
        report.request_chart(out / "health-stall.png", probes, windows,
                             f"/health latency while one request at a time is preprocessed (probe every {interval})")
        dispatch = {arm: traffic.request_dispatch(arm_dirs[arm]) for arm in arms}
        (out / "dispatch.json").write_text(json.dumps(dispatch, indent=1) + "\n")
        table += "\n" + report.dispatch_table(dispatch, arms)
    if args.flood_minutes > 0:
        flood = {}
        flood_probes, flood_windows = {}, {}
        for arm in arms:
            session = results.load_session(arm_dirs[arm])
            record = session.get("flood") or {}
            if not record:
                raise results.ResultsError(f"{arm_dirs[arm] / 'session.json'}: no flood record")
            flood_probes[arm] = results.load_probes(arm_dirs[arm] / "flood_probes.jsonl")
            flood[arm] = results.flood_stats(flood_probes[arm], record["start"], record["end"], record["requests"])
            flood_windows[arm] = [("flood", record["start"], record["end"])]
        (out / "flood.json").write_text(json.dumps({arm: asdict(s) for arm, s in flood.items()}, indent=1) + "\n")
        table += "\n" + report.flood_table(flood, args.flood_rps, args.flood_minutes, args.flood_bytes)
        report.timeline_chart(out / "flood.png", flood_probes, flood_windows,
                     f"/health during a flood of new {args.flood_bytes / 1e6:.0f} MB conversations at {args.flood_rps} rps")
    if args.mixed_minutes > 0:
        baseline = BASELINE if BASELINE in arms else arms[0]
        mixed = {arm: traffic.mixed_stats(arm_dirs[arm], arm_dirs[baseline]) for arm in arms}
        (out / "mixed.json").write_text(json.dumps({"baseline": baseline, "minutes": args.mixed_minutes,
                                                    **{arm: asdict(m) for arm, m in mixed.items()}}, indent=1) + "\n")
        table += "\n" + report.mixed_table(mixed, baseline, args.mixed_minutes)
        mixed_probes, mixed_windows = {}, {}
        for arm in arms:
            record = results.load_session(arm_dirs[arm])["mixed"]
            mixed_probes[arm] = results.load_probes(arm_dirs[arm] / record["probe_file"])
            mixed_windows[arm] = [("mixed traffic", record["start"], record["end"])]
        report.timeline_chart(out / "mixed.png", mixed_probes, mixed_windows,
                              f"/health during {args.mixed_minutes:g} min of mixed traffic (probe every {interval})")
    table += "\n" + report.worst_probes_table(summary["worst_probes"], arms)
    table += "\n" + report.offload_table(summary["offload"], arms)
    if requests or args.mixed_minutes > 0:
        dispatch_all = json.loads((out / "dispatch.json").read_text()) if requests else {}
        mixed_all = json.loads((out / "mixed.json").read_text()) if args.mixed_minutes > 0 else {}
        table = report.targets_table(summary, dispatch_all, mixed_all, arms, BASELINE) + "\n" + table
    table = report.tokenizer_section(tokenizer) + "\n" + report.priority_section(
        {arm: results.load_session(arm_dirs[arm]) for arm in arms}) + "\n" + table
    if not args.no_profile:
        attributed = {arm: attribute_arm(arm_dirs[arm]) for arm in arms}
        (out / "attribution.json").write_text(json.dumps(attributed, indent=1) + "\n")
        table += "\n" + report.attribution_section(attributed)
    (out / "results.md").write_text(table)
    return summary


def reshape(args: argparse.Namespace, out: Path) -> int:
    """Re-shapes a finished run's raw data with this code (no containers): arms from run.json."""
    run = json.loads((out / "run.json").read_text())
    arms = tuple(run["arm_order"])
    session = results.load_session(out / "arms" / arms[0])
    requests = [r["name"] for r in session.get("requests", [])]
    args.mixed_minutes = (session.get("mixed") or {}).get("minutes", 0.0)
    flood = session.get("flood") or {}
    args.flood_minutes = flood.get("minutes", 0.0)
    args.flood_rps, args.flood_bytes = flood.get("rps", args.flood_rps), flood.get("body_bytes", args.flood_bytes)
    args.no_profile = not session.get("profiles")
    write_outputs(args, out, requests, arms)
    print((out / "results.md").read_text())
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="health_stall", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the two text requests only, no flood")
    parser.add_argument("--out", help="output directory (default: lab-out/health-stall-<UTC time>)")
    parser.add_argument("--arms", help="comma-separated arms to run, in order (default: every arm with an image)")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="probe period (default: 10; 200 is the old mode)")
    parser.add_argument("--requests", nargs="+", help=f"override the request list (default full: {FULL_REQUESTS})")
    parser.add_argument("--flood-minutes", type=float, default=0.0, help="flood of new conversations (default: 0, off)")
    parser.add_argument("--mixed-minutes", type=float, default=None, help="mixed-traffic length (default: 0 quick, 3 full)")
    parser.add_argument("--no-profile", action="store_true", help="no py-spy sampling (no attribution)")
    parser.add_argument("--py-spy", type=Path, help="py-spy binary (default: the locked wheel in the runfiles)")
    parser.add_argument("--profile-rate-hz", type=int, default=100, help="py-spy samples per second (default: 100)")
    parser.add_argument("--profile-native", action="store_true",
                        help="sample every thread with its C frames (py-spy --native --idle), not only the GIL's"
                             " holder: shows who waits in take_gil and who holds it; stops the server per sample")
    parser.add_argument("--sample-threads-ms", type=float, default=0.0, metavar="MS",
                        help="run the server's own thread sampler (tools/sglang_server/in_container/loop_sampler.py)"
                             " every MS: each thread's exact CPU time and frames during the slowest probes. It"
                             " allocates frames and takes the GIL each period, so it adds load (default: 0, off)")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for every arm's servers (repeatable; recorded in "
                        "run.json), for A/B runs of an engine setting such as SGLANG_MM_PROCESSES=1")
    parser.add_argument("--flood-rps", type=float, default=0.5)
    parser.add_argument("--flood-bytes", type=int, default=3_000_000)
    parser.add_argument("--tokenizer", choices=TOKENIZERS, default="glm",
                        help="the model directories' tokenizer: glm, the GLM-class fixture (default), or small,"
                             " the 8,000-token BPE of the runs before it")
    parser.add_argument("--no-metrics", action="store_true",
                        help="servers without --enable-metrics: no offload counters (the quick rule then fails on v3)")
    parser.add_argument("--client-nice", type=int, choices=range(0, 20), default=10, metavar="0-19",
                        help="priority of the lab's own work: this program and its podman calls, the session's"
                             " client and py-spy; the servers and the prober run at 0, as in production, where"
                             " clients and profilers do not share the server's cores (default: 10; 0: the"
                             " conditions of the runs before 2026-12-03)")
    check = parser.add_mutually_exclusive_group()
    check.add_argument("--check", action="store_true", help="exit 1 unless the quick rule holds")
    check.add_argument("--check-v3", action="store_true",
                       help="exit 1 unless v3's half of the quick rule holds (for --arms v3: nothing compared with stock)")
    parser.add_argument("--same-image", action="store_true", help="run the stock image in the v3 arm too")
    parser.add_argument("--image", action="append", default=[], metavar="ARM=LAYOUT", help="set by bazel run")
    parser.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB", help="set by bazel run")
    parser.add_argument("--cache", type=Path, default=default_cache_root(), help="podman storage (default: %(default)s)")
    parser.add_argument("--arm-timeout-s", type=float, default=None, help="bound on one arm's container")
    parser.add_argument("--reshape", action="store_true",
                        help="only re-shape the raw data of the finished run in --out (no containers)")
    args = parser.parse_args(argv)
    if args.profile_native and args.no_profile:
        parser.error("--profile-native picks how py-spy samples; --no-profile turns py-spy off: give one of them")
    if args.reshape:
        if not args.out:
            raise SystemExit("health_stall: --reshape needs --out DIR of a finished run")
        return reshape(args, _resolve_out(args.out))
    server_env = parse_server_env(args.server_env)
    if args.mixed_minutes is None:
        args.mixed_minutes = 0.0 if args.quick else 3.0
    requests = args.requests or (list(checks.QUICK_REQUESTS) if args.quick else FULL_REQUESTS)
    arm_timeout = args.arm_timeout_s or (
        600.0 + 120.0 * len(requests) + 60.0 * args.flood_minutes * 1.5 + 60.0 * args.mixed_minutes * 2 + 240.0)

    out = _resolve_out(args.out)
    # podman, conmon and so the containers inherit it; the session undoes it for what it measures.
    os.setpriority(os.PRIO_PROCESS, 0, args.client_nice)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    started = time.monotonic()
    shm_before = _shm_entries()
    lab = None
    staging = None
    facts: dict = {"command": ["health_stall", *argv], "out": str(out), "arms": {}, "tokenizer": args.tokenizer,
                   "client_nice": args.client_nice, "server_env": server_env}
    code = 1
    try:
        images = _images(args)
        arms = tuple(images)
        facts["arm_order"] = list(arms)
        py_spy = None if args.no_profile else find_py_spy(args.py_spy)
        out.mkdir(parents=True, exist_ok=True)
        podman = Podman(args.cache)
        podman.check()
        run_label = f"lab-health-stall-{os.getpid()}-{int(time.time())}"
        lab = Lab(podman, out, run_label, server_env)
        staging = Path(tempfile.mkdtemp(prefix="health-stall."))
        lab_files = _stage_lab_files(staging / "lab")
        tools = staging / "tools"
        tools.mkdir()
        if py_spy is not None:
            shutil.copyfile(py_spy, tools / "py-spy")
            (tools / "py-spy").chmod(0o755)  # extracted wheels may drop the executable bit
        image_ids = {}
        for arm in arms:
            image_ids[arm] = podman.load(images[arm])
            facts["arms"][arm] = {"manifest": images[arm].manifest_digest, "image_id": image_ids[arm],
                                  "layout": str(images[arm].layout)}
        print(f"health_stall: images loaded ({time.monotonic() - started:.0f} s); output in {out}", flush=True)

        # Made once, in the stock image if it runs (each image has `tokenizers` and `transformers`),
        # mounted read-only in every arm; remade when --out holds another tokenizer's.
        models = out / "models"
        if not models_match(models, args.tokenizer):
            shutil.rmtree(models, ignore_errors=True)
            models.mkdir(parents=True)
            code_model = lab.run_container(
                image_ids[BASELINE if BASELINE in arms else arms[0]], "models",
                ["python3", f"{LAB_DIR}/model_dir.py", "--text", f"{OUT_DIR}/text", "--vision", f"{OUT_DIR}/vision",
                 "--tokenizer", args.tokenizer],
                [Mount(lab_files, LAB_DIR), Mount(models, OUT_DIR, read_only=False)], 300.0, out / "models.log")
            if code_model != 0:
                raise ContainerError(f"making the model directories failed (exit {code_model}); see {out / 'models.log'}")

        command = session_command(args, requests)
        facts["session_command"] = command
        for arm in arms:
            arm_dir = out / "arms" / arm
            shutil.rmtree(arm_dir, ignore_errors=True)
            arm_dir.mkdir(parents=True)
            t0 = time.monotonic()
            print(f"health_stall: arm {arm}: starting {images[arm].manifest_digest[:19]}...", flush=True)
            arm_code = lab.run_container(
                image_ids[arm], arm, command,
                [Mount(lab_files, LAB_DIR), Mount(tools, TOOLS_DIR), Mount(models / "text", MODEL_DIR),
                 Mount(models / "vision", VISION_MODEL_DIR), Mount(arm_dir, OUT_DIR, read_only=False)],
                arm_timeout, arm_dir / "container.log")
            facts["arms"][arm].update({"exit": arm_code, "seconds": round(time.monotonic() - t0, 1)})
            print(f"health_stall: arm {arm}: exit {arm_code} after {time.monotonic() - t0:.0f} s", flush=True)
            if arm_code != 0:
                raise ContainerError(f"arm {arm} failed (exit {arm_code}); see {arm_dir}/container.log and server.log")

        summary = write_outputs(args, out, requests, arms)
        print((out / "results.md").read_text())
        code = 0
        if args.check or args.check_v3:
            failures = checks.quick_failures(summary, baseline=args.check)
            facts["check_failures"] = failures
            for failure in failures:
                print(f"health_stall: CHECK FAILED: {failure}", file=sys.stderr)
            code = 1 if failures else 0
            if not failures:
                print("health_stall: check passed")
    except (UsageError, LayoutError, ContainerError, results.ResultsError, _Interrupted) as err:
        print(f"health_stall: error: {err}", file=sys.stderr)
        facts["error"] = str(err)
        code = 1
    finally:
        if lab is not None:
            lab.remove_all()
            leftover = lab.podman.ids_with_label(lab.run_label)
            facts["containers_removed"] = lab.removed
            facts["containers_left"] = leftover
            if leftover:
                print(f"health_stall: error: containers left behind: {leftover}", file=sys.stderr)
                code = 1
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        shm_after = _shm_entries()
        facts["host_dev_shm"] = {"added": sorted(set(shm_after) - set(shm_before)),
                                 "removed": sorted(set(shm_before) - set(shm_after))}
        facts["seconds"] = round(time.monotonic() - started, 1)
        if out.is_dir():
            (out / "run.json").write_text(json.dumps(facts, indent=1) + "\n")
        print(f"health_stall: done in {facts['seconds']:.0f} s, exit {code}; {out}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
