"""A minimal REAPI worker for BuildGrid's Bots API (no worker ships on PyPI or in Debian).

It leases actions, materializes their input tree from the CAS, runs the command inside the
execution image the action's platform names (`container-image`, resolved by digest to an image
built in this graph; tools/remote/executor.py: bubblewrap on its unpacked rootfs, never on the
host), uploads outputs, and completes the lease with the ActionResult. An action naming an
image the bot does not have fails with that message. Runs in the BuildGrid venv, whose wheel
carries the generated protos.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2, bytestream_pb2_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc, worker_pb2
from buildgrid._protos.google.rpc import code_pb2

from tools.podman import bwrap_backend
from tools.podman.spec import default_cache_root
from tools.remote import executor

BATCH_LIMIT = 2 * 1024 * 1024  # above this, blobs go through ByteStream
CHUNK = 1024 * 1024
POLL_SECONDS = 5


def digest_of(data: bytes) -> re_pb2.Digest:
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


class Cas:
    def __init__(self, channel: grpc.Channel, instance: str, cache_dir: Path) -> None:
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bytestream = bytestream_pb2_grpc.ByteStreamStub(channel)
        self.instance = instance
        # Blobs are content-addressed: keep them across actions, link them into input trees.
        self.cache_dir = cache_dir
        cache_dir.mkdir(parents=True, exist_ok=True)

    def _cached(self, digest: re_pb2.Digest) -> Path:
        return self.cache_dir / f"{digest.hash}_{digest.size_bytes}"

    def prefetch(self, digests: list[re_pb2.Digest]) -> None:
        """Fills the local cache with one BatchReadBlobs per ~2 MiB of small blobs."""
        missing = {d.hash: d for d in digests if not self._cached(d).exists()}
        batch: list[re_pb2.Digest] = []
        size = 0
        for digest in list(missing.values()) + [None]:
            if digest is not None and digest.size_bytes > BATCH_LIMIT:
                self._store(digest, self._read_stream(digest))
                continue
            if batch and (digest is None or size + digest.size_bytes > BATCH_LIMIT):
                reply = self.cas.BatchReadBlobs(re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=batch))
                for response in reply.responses:
                    if response.status.code != code_pb2.OK:
                        raise RuntimeError(f"CAS read of {response.digest.hash} failed: {response.status.message}")
                    self._store(response.digest, response.data)
                batch, size = [], 0
            if digest is not None:
                batch.append(digest)
                size += digest.size_bytes

    def _store(self, digest: re_pb2.Digest, data: bytes) -> None:
        tmp = self._cached(digest).with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self._cached(digest))

    def read(self, digest: re_pb2.Digest) -> bytes:
        self.prefetch([digest])
        return self._cached(digest).read_bytes()

    def _read_stream(self, digest: re_pb2.Digest) -> bytes:
        name = f"{self.instance}/blobs/{digest.hash}/{digest.size_bytes}".lstrip("/")
        return b"".join(r.data for r in self.bytestream.Read(bytestream_pb2.ReadRequest(resource_name=name)))

    def write(self, data: bytes) -> re_pb2.Digest:
        digest = digest_of(data)
        if digest.size_bytes <= BATCH_LIMIT:
            request = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance)
            request.requests.add(digest=digest, data=data)
            self.cas.BatchUpdateBlobs(request)
            return digest
        name = f"{self.instance}/uploads/{uuid.uuid4()}/blobs/{digest.hash}/{digest.size_bytes}".lstrip("/")

        def chunks():
            for offset in range(0, len(data), CHUNK):
                yield bytestream_pb2.WriteRequest(
                    resource_name=name, write_offset=offset, data=data[offset : offset + CHUNK],
                    finish_write=offset + CHUNK >= len(data),
                )

        self.bytestream.Write(chunks())
        return digest

    def fetch_tree(self, digest: re_pb2.Digest, root: Path) -> None:
        directories: list[tuple[Path, re_pb2.Directory]] = []
        pending = [(root, digest)]
        while pending:  # read the Directory messages level by level, batched
            self.prefetch([d for _, d in pending])
            level = [(path, re_pb2.Directory.FromString(self._cached(d).read_bytes())) for path, d in pending]
            directories += level
            pending = [(path / child.name, child.digest) for path, directory in level for child in directory.directories]
        self.prefetch([f.digest for _, directory in directories for f in directory.files])
        for path, directory in directories:
            path.mkdir(parents=True, exist_ok=True)
            for f in directory.files:
                os.link(self._linkable(f.digest, f.is_executable), path / f.name)
            for link in directory.symlinks:
                (path / link.name).symlink_to(link.target)

    def _linkable(self, digest: re_pb2.Digest, executable: bool) -> Path:
        """A read-only copy of the blob with the input's mode, hard-linked into every input tree.

        Copying each action's runfiles (thousands of files) cost ~40 s per test action; a link
        is free. The mode lives on the shared inode, hence one copy per mode.
        """
        path = self._cached(digest).with_suffix(".x" if executable else ".r")
        if not path.exists():
            tmp = path.with_name(path.name + ".tmp")
            shutil.copyfile(self._cached(digest), tmp)
            tmp.chmod(0o555 if executable else 0o444)
            os.replace(tmp, path)
        return path

    def upload_dir(self, root: Path) -> re_pb2.Tree:
        """Returns the REAPI Tree of `root`, uploading every file and Directory message."""
        children: list[re_pb2.Directory] = []

        def walk(path: Path) -> re_pb2.Directory:
            directory = re_pb2.Directory()
            for entry in sorted(path.iterdir(), key=lambda p: p.name):
                if entry.is_dir() and not entry.is_symlink():
                    child = walk(entry)
                    children.append(child)
                    directory.directories.add(name=entry.name, digest=self.write(child.SerializeToString()))
                else:
                    directory.files.add(
                        name=entry.name, digest=self.write(entry.read_bytes()),
                        is_executable=os.access(entry, os.X_OK),
                    )
            return directory

        root_dir = walk(root)
        return re_pb2.Tree(root=root_dir, children=children)


def execute(cas: Cas, images: executor.ImageSet, action: re_pb2.Action, scratch: Path,
            log: Callable[[str], None]) -> re_pb2.ActionResult:
    command = re_pb2.Command.FromString(cas.read(action.command_digest))
    reference = executor.platform_image(action.platform, command.platform)
    workdir = scratch / "exec"
    cas.fetch_tree(action.input_root_digest, workdir)
    cwd = workdir / command.working_directory
    for out in list(command.output_files) + list(command.output_directories) + list(command.output_paths):
        (cwd / out).parent.mkdir(parents=True, exist_ok=True)
    env = {v.name: v.value for v in command.environment_variables}
    timeout = action.timeout.seconds or None
    proc = executor.run(images, reference, workdir, scratch / "tmp", command.working_directory, env,
                        list(command.arguments), timeout)
    log(f"exit {proc.exit_code} in image {proc.image_digest}")
    result = re_pb2.ActionResult(exit_code=proc.exit_code)
    result.stdout_digest.CopyFrom(cas.write(proc.stdout))
    result.stderr_digest.CopyFrom(cas.write(proc.stderr))
    for out in command.output_files:
        path = cwd / out
        if path.is_file():
            result.output_files.add(path=out, digest=cas.write(path.read_bytes()), is_executable=os.access(path, os.X_OK))
    for out in command.output_directories:
        path = cwd / out
        if path.is_dir():
            tree = cas.upload_dir(path)
            result.output_directories.add(path=out, tree_digest=cas.write(tree.SerializeToString()))
    return result


class Job:
    """One lease executing on a thread, so the session keeps polling (and stays alive) meanwhile."""

    def __init__(self, cas: Cas, images: executor.ImageSet, lease_id: str, action: re_pb2.Action, scratch_root: Path) -> None:
        self.lease_id = lease_id
        self.result: re_pb2.ActionResult | None = None
        self.error: str | None = None
        self.code = code_pb2.INTERNAL
        self.thread = threading.Thread(target=self._run, args=(cas, images, action, scratch_root), daemon=True)
        self.thread.start()

    def _log(self, message: str) -> None:
        print(f"bot: lease {self.lease_id}: {message}", flush=True)

    def _run(self, cas: Cas, images: executor.ImageSet, action: re_pb2.Action, scratch_root: Path) -> None:
        scratch = Path(tempfile.mkdtemp(dir=scratch_root))
        try:
            self.result = execute(cas, images, action, scratch, self._log)
        except executor.ImageError as err:  # the action asks for something this worker cannot be
            self.code = code_pb2.FAILED_PRECONDITION
            self.error = f"conformance bot: {err}"
        except Exception as err:  # reported on the lease, never wedges it
            self.error = f"conformance bot: {err!r}"
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


class _Header(grpc.AuthMetadataPlugin):
    """Adds the credential header to every call (gRPC sends call credentials over TLS only)."""

    def __init__(self, name: str, value: str) -> None:
        self.metadata = ((name.lower(), value),)

    def __call__(self, context, callback) -> None:
        callback(self.metadata, None)


def open_channel(server: str, tls: tuple[Path, Path, Path] | None, header_file: Path | None) -> grpc.Channel:
    """Plain gRPC, or TLS with a client certificate (CA, cert, key) and optionally a header."""
    options = [("grpc.max_receive_message_length", 64 << 20)]
    if tls is None:
        if header_file:
            raise SystemExit("bot: --header-file needs TLS (--tls-ca, --tls-cert, --tls-key): a credential is not sent in clear")
        return grpc.insecure_channel(server, options=options)
    ca, cert, key = tls
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(), private_key=key.read_bytes(), certificate_chain=cert.read_bytes())
    if header_file:
        # NAME=VALUE in a file, not on the command line, which any local user can read in ps.
        name, sep, value = header_file.read_text().strip().partition("=")
        if not sep or not name or not value:
            raise SystemExit(f"bot: {header_file} must hold one NAME=VALUE line (the credential header)")
        credentials = grpc.composite_channel_credentials(credentials, grpc.metadata_call_credentials(_Header(name, value)))
    return grpc.secure_channel(server, credentials, options=options)


def serve(channel: grpc.Channel, server: str, instance: str, scratch_root: Path, images: executor.ImageSet,
          stop: list[bool]) -> None:
    bots = bots_pb2_grpc.BotsStub(channel)
    cas = Cas(channel, instance, scratch_root / "blob-cache")
    worker = worker_pb2.Worker()
    device = worker.devices.add(handle="local")
    device.properties.add(key="OSFamily", value="Linux")
    session = bots.CreateBotSession(bots_pb2.CreateBotSessionRequest(
        parent=instance, bot_session=bots_pb2.BotSession(bot_id=f"conformance-bot-{os.getpid()}", status=bots_pb2.OK, worker=worker),
    ), timeout=POLL_SECONDS)
    print(f"bot: session {session.name} on {server}", flush=True)
    finished: set[str] = set()
    job: Job | None = None
    while not stop[0]:
        if os.environ.get("BOT_DEBUG"):
            print(f"bot: leases {[(l.id, l.state) for l in session.leases]}", flush=True)
        for lease in session.leases:
            if job is not None and lease.id == job.lease_id and not job.thread.is_alive():
                if job.result is not None:
                    lease.result.Pack(job.result)
                    lease.status.code = code_pb2.OK
                else:
                    lease.status.code = job.code
                    lease.status.message = job.error or "conformance bot: no result"
                lease.state = bots_pb2.LeaseState.COMPLETED
                finished.add(lease.id)
                print(f"bot: lease {lease.id}: status {lease.status.code} {lease.status.message}", flush=True)
                job = None
            elif job is None and lease.id not in finished and lease.state in (bots_pb2.LeaseState.PENDING, bots_pb2.LeaseState.ACTIVE):
                # A lease assigned while an earlier poll timed out comes back ACTIVE, not PENDING.
                lease.state = bots_pb2.LeaseState.ACTIVE
                action = re_pb2.Action()
                lease.payload.Unpack(action)
                print(f"bot: lease {lease.id}: running action {digest_of(action.SerializeToString()).hash[:12]}", flush=True)
                job = Job(cas, images, lease.id, action, scratch_root)
        # BuildGrid long-polls for work until the call's deadline; without one it holds the call
        # (and any lease it assigned meanwhile) far longer than the session's keepalive.
        try:
            session = bots.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session), timeout=POLL_SECONDS,
            )
        except grpc.RpcError as err:
            # On a loaded machine the long poll's answer can miss the deadline; the session is
            # still ours, and a lease assigned meanwhile comes back ACTIVE on the next poll.
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            print("bot: poll missed its deadline; polling again", flush=True)
        if job is not None:
            job.thread.join(timeout=0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", help="HOST:PORT of BuildGrid's Bots service, e.g. 127.0.0.1:50052")
    parser.add_argument("--instance", default="")
    parser.add_argument("--tls-ca", type=Path, help="CA of the server's certificate (with --tls-cert/--tls-key: mTLS)")
    parser.add_argument("--tls-cert", type=Path, help="client certificate (PEM)")
    parser.add_argument("--tls-key", type=Path, help="client key (PEM)")
    parser.add_argument("--header-file", type=Path, help="a file holding NAME=VALUE, sent as a header on every call")
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--image-files", type=Path, action="append", required=True,
                        help="image_files JSON of an execution image (tools/podman); repeatable")
    parser.add_argument("--runfiles", type=Path, required=True, help="the tree the JSONs' paths are relative to")
    parser.add_argument("--rootfs-cache", type=Path, default=default_cache_root() / "rootfs",
                        help="unpacked layer chains (shared with tools/podman's bubblewrap backend)")
    args = parser.parse_args()
    tls_args = (args.tls_ca, args.tls_cert, args.tls_key)
    if any(tls_args) and not all(tls_args):
        parser.error("--tls-ca, --tls-cert and --tls-key go together")
    if bwrap_backend.unavailable_reason():
        parser.error(bwrap_backend.unavailable_reason())
    images = executor.ImageSet([executor.load_image_files(f, args.runfiles) for f in args.image_files], args.rootfs_cache)
    for digest in images.images:
        print(f"bot: execution image {digest}", flush=True)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    channel = open_channel(args.server, tls_args if all(tls_args) else None, args.header_file)
    serve(channel, args.server, args.instance, args.scratch, images, stop)


if __name__ == "__main__":
    main()
