"""Remote cache and remote execution conformance against a real REAPI server (BuildGrid).

    ./tools/bazel run //tools/remote:conformance -- [--mode cache|exec] [--tls] [--targets ...]

Starts BuildGrid 0.4.4 (hash-locked from PyPI) on 127.0.0.1 as CAS and action cache, and in
`exec` mode also PostgreSQL (its scheduler database) and tools/remote/bot.py as the worker, which
runs every action inside //tools/remote:exec_image (the platform's pinned container-image) with
bubblewrap. With --tls the server speaks TLS only, requires a client certificate from a
throwaway CA made for the run and a credential header, and Bazel reads all of it (endpoint,
instance name, CA, client certificate and key, header) from tools/remote/remote.bazelrc.template
filled in for the run, as a user's rc file; the bot connects the same way. Then runs `bazel test` on a representative subset twice, each time from a fresh
output base, and asserts the second run was served from the remote cache; in `exec` mode also
that every action the bot ran ran in the pinned image; with --tls, last, that a client
certificate from another CA and a wrong header are refused, each named by
tools/remote/diagnose.py. Every process it starts, it stops by
process group; its scratch directory is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.remote import certs, diagnose, rcfile
from tools.remote.buildgrid_config import ACTOR_HEADER, ServerConfig, ServerTls, actor_acl

# Every test that may run remotely (no-remote and, in exec mode, no-remote-exec ones are filtered
# out), plus the v3 patch
# chain and the v3 image (patch layer, config, manifest: //recipes:glm53_v3 is built). Left out:
# the engine images' structure/record/evidence tests, whose runfiles are the 2 GiB CPU base.
DEFAULT_TARGETS = (
    "//tools/ci/...",
    "//tools/python/...",
    "//tools/patches/...",
    "//tools/remote/...",
    "//tools/oci/...",
    "//tools/podman:unit_test",
    "//tools/release:record_test",
    "//tools/release:layer_sbom_test",
    "//deploy/rollout:unit_test",
    "//patches:v3",
    "//patches:chains_test",
    "//patches:candidates_test",
    "//patches:real_series_test",
    "//patches:series_base_test",
    "//patches:suite_env_test",
    "//recipes:glm53_v3",
    "//pins:table_test",
    "//pins:ca_bundle_test",
    "//recipes/bases:toolchain_test",
    "//deploy/compose_gen/...",
    "//deploy/validators:structure_test",
    "//deploy/validators:services_test",
    "//deploy/validators:telemetry_test",
    "//deploy/validators:prod_contract_test",
    "//deploy/validators:loading_test",
    "//compose:files_test",
    "//deploy:deployable_test",
    "//deploy:releases_test",
    "//compose:deployable_test",
    "//lab:unit_test",
    "//tools/sglang_server:metrics_text_test",
)
PG_BIN = Path("/usr/lib/postgresql/15/bin")
TLS_INSTANCE = "glm53-conformance"
# Built by the refusal checks: they fail at Bazel's first call to the server, before any action.
PROBE_TARGET = "//tools/remote:remote_lib"


class ConformanceError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConformanceError(f"{what} exited with {proc.returncode} before listening on 127.0.0.1:{port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.3)
    raise ConformanceError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class Processes:
    """Starts children in their own process groups and stops them all, newest first."""

    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], log: Path, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
        self.children.append((name, proc))
        return proc

    def stop_all(self) -> None:
        for name, proc in reversed(self.children):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        self.children.clear()


def install_buildgrid(lock: Path) -> Path:
    """pip --require-hashes into a cache dir keyed by the lock's sha256 (reused across runs)."""
    key = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    target = Path.home() / ".cache" / "glm53-engine" / f"buildgrid-{key}"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes",
             "--only-binary=:all:", "--target", str(target), "-r", str(lock)],
            check=True,
        )
        (target / ".complete").touch()
    return target


def start_postgres(procs: Processes, scratch: Path) -> str:
    if not (PG_BIN / "postgres").exists():
        raise ConformanceError(f"PostgreSQL 15 is not installed ({PG_BIN}); run `apt-get install postgresql-15`")
    # PostgreSQL's own directory (data, socket, cwd): the postgres user cannot enter Bazel's
    # runfiles tree, and the rest of the scratch dir stays root's (the bot's sandboxes, whose
    # user namespace cannot enter a directory of an unmapped user, live there).
    home = scratch / "pg"
    home.mkdir()
    shutil.chown(home, "postgres")
    scratch.chmod(0o711)
    data = home / "data"
    run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(run_as + [str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "bgd"],
                   check=True, stdout=subprocess.DEVNULL, cwd=home)
    port = free_port()
    proc = procs.start(
        "postgres",
        run_as + [str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-k", str(home), "-c", "listen_addresses=127.0.0.1"],
        scratch / "postgres.log",
        cwd=home,
    )
    wait_for_port(port, proc, "PostgreSQL")
    subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "bgd", "bgd"], check=True)
    return f"postgresql+psycopg2://bgd@127.0.0.1:{port}/bgd"


class ServerLog:
    """The server's log from a mark on: what it said about the connections of one Bazel run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since_mark(self) -> str:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")


def run_bazel(workspace: Path, output_base: Path, startup: list[str], command: list[str], log: Path) -> subprocess.CompletedProcess:
    bazel = [str(workspace / "tools" / "bazel"), f"--output_base={output_base}", *startup]
    proc = subprocess.run(bazel + command, cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(proc.stdout)
    subprocess.run(bazel + ["shutdown"], cwd=workspace, capture_output=True)
    return proc


def diagnosis(proc: subprocess.CompletedProcess, output_base: Path, server_log: ServerLog) -> diagnose.Diagnosis | None:
    """What refused the connection: Bazel's output, its java.log (a crash prints nothing) and the server's log."""
    java_log = output_base / "java.log"
    return diagnose.explain(proc.stdout, java_log.read_text(errors="replace") if java_log.exists() else "", server_log.since_mark())


def bazel_test(workspace: Path, output_base: Path, startup: list[str], flags: list[str], targets: list[str], log: Path,
               server_log: ServerLog) -> str:
    server_log.mark()
    proc = run_bazel(workspace, output_base, startup, ["test", "--keep_going", *flags, *targets], log)
    if proc.returncode != 0:
        found = diagnosis(proc, output_base, server_log)
        cause = f"Bazel could not use the remote server: {found.message}\n" if found else ""
        raise ConformanceError(f"bazel test failed ({proc.returncode}); {cause}last lines:\n" + "\n".join(proc.stdout.splitlines()[-25:]))
    return proc.stdout


def write_private(path: Path, text: str) -> Path:
    """Created 0600 before anything is written: keys, the header and rc files holding it."""
    path.touch(mode=0o600)
    path.write_text(text)
    return path


class TlsSetup:
    """The run's CA, certificates, header and the rc files made from the committed template."""

    def __init__(self, scratch: Path, template: Path, port: int) -> None:
        self.files = certs.generate(scratch / "tls")
        self.scratch = scratch
        self.template = template
        self.port = port
        self.token = secrets.token_hex(16)  # the header credential; never printed
        self.acl = write_private(scratch / "tls" / "acl.yml", actor_acl(TLS_INSTANCE, self.token))
        self.header_file = write_private(scratch / "tls" / "header", f"{ACTOR_HEADER}={self.token}\n")

    def server(self) -> ServerTls:
        return ServerTls(cert=self.files.server.cert, key=self.files.server.key, client_ca=self.files.ca)

    def rc(self, name: str, client: certs.Issued, token: str) -> Path:
        endpoint = f"127.0.0.1:{self.port}"
        text = rcfile.render(self.template.read_text(), {
            "CACHE_ENDPOINT": endpoint, "EXEC_ENDPOINT": endpoint, "INSTANCE_NAME": TLS_INSTANCE,
            "CA_CERT": str(self.files.ca), "CLIENT_CERT": str(client.cert), "CLIENT_KEY": str(client.key),
            "HEADER_NAME": ACTOR_HEADER, "HEADER_VALUE": token, "JOBS": "8", "TIMEOUT": "120",
        }, source=str(self.template))
        return write_private(self.scratch / name, text)

    def bot_args(self) -> list[str]:
        return ["--instance", TLS_INSTANCE, "--tls-ca", str(self.files.ca), "--tls-cert", str(self.files.client.cert),
                "--tls-key", str(self.files.client.key), "--header-file", str(self.header_file)]


def check_refused(workspace: Path, output_base: Path, rc: Path, config: str, expected: str, log: Path,
                  server_log: ServerLog) -> str:
    """A Bazel run with rc's credentials must fail, and diagnose must name `expected` as the cause."""
    server_log.mark()
    proc = run_bazel(workspace, output_base, [f"--bazelrc={rc}"], ["build", f"--config={config}", PROBE_TARGET], log)
    if proc.returncode == 0:
        raise ConformanceError(f"the server accepted the connection of {rc.name} ({expected} expected); see {log}")
    found = diagnosis(proc, output_base, server_log)
    if found is None or found.cause != expected:
        raise ConformanceError(f"{rc.name}: expected the cause {expected!r}, found "
                               f"{found.cause + ': ' + found.message if found else 'no known cause'}; see {log}")
    return found.message


def check_bot_images(bot_log: str, pinned: str) -> int:
    """Every action the bot ran ran in the pinned image; returns how many ran."""
    images = re.findall(r"^bot: lease \S+: exit -?\d+ in image (\S+)$", bot_log, re.M)
    others = sorted(set(images) - {pinned})
    if others:
        raise ConformanceError(f"the bot ran actions in {others}, not the pinned rbe_image {pinned}")
    return len(images)


def check_second_run_cached(output: str) -> tuple[int, int]:
    """Every test of the second run must be (cached) and actions must hit the remote cache."""
    results = re.findall(r"^(//\S+)\s+(\(cached\) )?PASSED", output, re.M)
    uncached = [label for label, cached in results if not cached]
    hits = re.search(r"(\d+) remote cache hit", output)
    if not results:
        raise ConformanceError("the second run reported no test results")
    if uncached:
        raise ConformanceError(f"not served from the remote cache on the second run: {uncached}")
    if not hits:
        raise ConformanceError("the second run reported no remote cache hits")
    return len(results), int(hits.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("cache", "exec"), default="exec")
    parser.add_argument("--targets", nargs="+", default=list(DEFAULT_TARGETS))
    parser.add_argument("--tls", action="store_true",
                        help="TLS with a client certificate and a header, from the rc template; then check refusals")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs) for debugging")
    args = parser.parse_args(argv)
    # A SIGTERM must still run the clean-up below (children live in their own process groups).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workspace = Path(os.environ.get("BUILD_WORKSPACE_DIRECTORY", Path.cwd()))
    runfiles = Path(__file__).absolute().parents[2]  # this workspace's tree in the runfiles
    lock = runfiles / "third_party" / "python" / "remote_conformance.lock"
    scratch = Path(tempfile.mkdtemp(prefix="glm53-remote-"))
    procs = Processes()
    started = time.monotonic()
    try:
        site = install_buildgrid(lock)
        env = {**os.environ, "PYTHONPATH": str(site)}
        port = free_port()
        postgres_url = start_postgres(procs, scratch) if args.mode == "exec" else None
        if postgres_url:
            subprocess.run([sys.executable, "-c", "from buildgrid.server.app import cli; cli()", "migrate", "apply", postgres_url],
                           env=env, check=True, stdout=subprocess.DEVNULL)
        tls = TlsSetup(scratch, runfiles / "tools" / "remote" / "remote.bazelrc.template", port) if args.tls else None
        config = scratch / "bgd.yml"
        config.write_text(ServerConfig(
            port=port, storage_dir=scratch / "cas", postgres_url=postgres_url,
            tls=tls.server() if tls else None, acl_config=tls.acl if tls else None,
            instance=TLS_INSTANCE if tls else "",
        ).render())
        server = procs.start("buildgrid", [sys.executable, "-c", "from buildgrid.server.app import cli; cli()", "server", "start", str(config)],
                             scratch / "buildgrid.log", env=env)
        server_log = ServerLog(scratch / "buildgrid.log")
        wait_for_port(port, server, "BuildGrid")
        endpoint = f"{'grpcs' if tls else 'grpc'}://127.0.0.1:{port}"
        # A no-remote test runs locally and is never cached remotely: the second run would rerun it.
        # A no-remote-exec test (host tools the execution image lacks) is cached but runs locally;
        # the integration ones (containers, a nested Bazel: minutes each) are left out as well.
        # The shared repository cache only spares re-downloads of external repositories; a disk
        # cache would serve actions the executor is meant to run.
        repository_cache = f"--repository_cache={Path.home() / '.cache' / 'glm53-engine' / 'repository-cache'}"
        config_group = "remote" if args.mode == "exec" else "remote-cache"
        # With TLS, everything about the server comes from the filled-in template, as for a user.
        startup = [f"--bazelrc={tls.rc('remote.bazelrc', tls.files.client, tls.token)}"] if tls else []
        endpoint_flags = [] if tls else (
            [f"--remote_executor={endpoint}"] if args.mode == "exec" else [f"--remote_cache={endpoint}"])
        flags = [f"--config={config_group}", *endpoint_flags, "--test_tag_filters=-no-remote,-integration", repository_cache]
        if args.mode == "exec":
            bot_env = {**env, "PYTHONPATH": f"{site}:{workspace}"}
            procs.start("bot", [sys.executable, "-m", "tools.remote.bot", f"127.0.0.1:{port}", "--scratch", str(scratch),
                                "--image-files", str(runfiles / "tools" / "remote" / "exec_image_files.json"),
                                "--runfiles", str(runfiles), *(tls.bot_args() if tls else [])],
                        scratch / "bot.log", env=bot_env, cwd=workspace)
            flags = [f"--config={config_group}", *endpoint_flags, "--test_tag_filters=-no-remote,-no-remote-exec,-integration", repository_cache]
        first = bazel_test(workspace, scratch / "ob1", startup, flags, args.targets, scratch / "run1.log", server_log)
        remote_actions = re.search(r"(\d+) remote[,.]", first)
        second = bazel_test(workspace, scratch / "ob2", startup, flags, args.targets, scratch / "run2.log", server_log)
        tests, hits = check_second_run_cached(second)
        in_image = ""
        if args.mode == "exec":
            if not remote_actions:
                raise ConformanceError("no action ran on the remote executor in the first run")
            pinned = (runfiles / "tools" / "remote" / "exec_image.digest").read_text().strip()
            ran = check_bot_images((scratch / "bot.log").read_text(), pinned)
            in_image = f" (the bot ran {ran} actions, all in the execution image {pinned})"
        refusals = ""
        if tls:
            wrong_cert = check_refused(workspace, scratch / "ob2", tls.rc("wrong-cert.bazelrc", tls.files.wrong_client, tls.token),
                                       config_group, "client-cert-refused", scratch / "wrong-cert.log", server_log)
            wrong_header = check_refused(workspace, scratch / "ob2", tls.rc("wrong-header.bazelrc", tls.files.client, secrets.token_hex(16)),
                                         config_group, "credential-refused", scratch / "wrong-header.log", server_log)
            print(f"conformance: a client certificate from another CA was refused: {wrong_cert}")
            print(f"conformance: a wrong credential header was refused: {wrong_header}")
            refusals = "; a client certificate from another CA and a wrong header were refused"
        transport = f"TLS, client certificate and header, instance {TLS_INSTANCE!r}" if tls else "plain gRPC"
        print(f"conformance ({args.mode}, {transport}) against BuildGrid at {endpoint}: first run "
              f"{remote_actions.group(1) if remote_actions else 0} remotely executed actions{in_image}; second run from "
              f"a clean output base: {tests} tests all (cached), {hits} remote cache hits{refusals}; {time.monotonic() - started:.1f} s")
        return 0
    except (ConformanceError, subprocess.CalledProcessError) as err:
        print(f"conformance: FAILED: {err} (logs in {scratch})", file=sys.stderr)
        args.keep = True
        return 1
    finally:
        procs.stop_all()
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
