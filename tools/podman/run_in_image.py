"""Runs commands or a pytest suite inside a built OCI image layout, with no network.

podman (runc, cgroupfs, --network=none, a memory cap, explicit ulimits) configured through
files under ~/.cache/glm53-engine/podman/, so no machine-wide set-up is needed; bubblewrap on
the unpacked layers when podman is unavailable (or with --backend bwrap).

Examples:
  run_in_image.py info --layout bazel-bin/recipes/glm53_v3
  run_in_image.py run --layout bazel-bin/recipes/glm53_v3 -- python3 -c 'import sglang'
  run_in_image.py suite --layout bazel-bin/recipes/glm53_v3 \\
      --tests /usr/share/glm53-engine/glm53_v3/tests --expect all-pass
  run_in_image.py suite --layout bazel-bin/recipes/glm53_v3 \\
      --tests /usr/share/glm53-engine/glm53_v3/tests --markers 'not timing'
  run_in_image.py suite --layout bazel-bin/recipes/bases/sglang_cpu_0_5_19 \\
      --host-tests patches/v1/tests/test_x.py patches/v1/tests/conftest.py --expect stock-bugs
  run_in_image.py prune    # empty the podman storage and the rootfs cache
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

from tools.podman import bwrap_backend, podman_backend, suite
from tools.oci.ocilayout import LayoutError, find_layout, parse_blob_args, parse_pairs, read_layout
from tools.podman.rootfs import UnpackError
from tools.podman.spec import GIB, Mount, RunSpec, default_cache_root

DRIVER = Path(__file__).parent / "in_image" / "pytest_driver.py"
# The sharding plugin the driver imports (the host launcher's own).
SHARD_PLUGIN = Path(__file__).parents[1] / "python" / "pytest_shard.py"
# Bazel's sharding variables that reach the container; the status file stays on the host.
SHARD_ENV = ("TEST_TOTAL_SHARDS", "TEST_SHARD_INDEX")
# Under /tmp because that is a tmpfs in the bubblewrap sandbox, where mount points can be made.
RUN_DIR = "/tmp/glm53-run"
OUT_DIR = "/tmp/glm53-out"
TESTS_DIR = "/tmp/glm53-tests"
DEFAULT_PYTEST_ARGS = ["-p", "no:cacheprovider", "-q", "-rfEs"]


class UsageError(Exception):
    """Bad command-line input."""


def _choose_backend(requested: str, cache: Path) -> str:
    if requested in ("podman", "bwrap"):
        return requested
    reason = podman_backend.unavailable_reason(podman_backend.PodmanConfig(cache / "podman"))
    if reason is None:
        return "podman"
    fallback = bwrap_backend.unavailable_reason()
    if fallback is not None:
        raise UsageError(f"no container runtime: podman: {reason}; bwrap: {fallback}")
    print(f"run_in_image: podman unavailable ({reason}); using bubblewrap", file=sys.stderr)
    return "bwrap"


def _execute(spec: RunSpec, backend: str, cache: Path) -> int:
    start = time.monotonic()
    if backend == "podman":
        code = podman_backend.run(podman_backend.PodmanConfig(cache / "podman"), spec)
    else:
        code = bwrap_backend.run(spec, cache / "rootfs")
    print(
        f"run_in_image: backend={backend} image={spec.image.manifest_digest}"
        f" exit={code} seconds={time.monotonic() - start:.1f}",
        file=sys.stderr,
    )
    return code


def _parse_mounts(items: list[str]) -> list[Mount]:
    mounts = []
    for item in items:
        parts = item.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise UsageError(f"--mount {item!r}: expected HOST:CONTAINER[:ro|rw]")
        mounts.append(Mount(Path(parts[0]), parts[1], read_only=len(parts) == 2 or parts[2] == "ro"))
    return mounts


def _stage_tests(files: list[str], dest: Path) -> None:
    """Copies test files (dereferencing Bazel's runfiles symlinks) keeping relative paths."""
    for name in files:
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise UsageError(f"--host-tests {name!r}: give paths relative to the current directory")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(name, target)


def _shard_env() -> dict[str, str]:
    """The shard of a sharded target (`shard_count`) for the driver, which deals the tests; the
    status file is touched here, where Bazel reads it, to say the split is honoured."""
    env = {name: os.environ[name] for name in SHARD_ENV if name in os.environ}
    status = os.environ.get("TEST_SHARD_STATUS_FILE")
    if env and status:
        Path(status).touch()
    return env


def _scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="run_in_image.", dir=os.environ.get("TEST_TMPDIR")))


def _image(args: argparse.Namespace):
    return read_layout(find_layout([Path(p) for p in args.layout]), parse_blob_args(args.blob), require_blobs=True)


def cmd_info(args: argparse.Namespace) -> int:
    image = _image(args)
    backend = _choose_backend(args.backend, args.cache)
    print(f"layout:   {image.layout}")
    print(f"manifest: {image.manifest_digest}")
    print(f"config:   {image.config_digest}")
    print(f"layers:   {len(image.layers)}")
    print(f"backend:  {backend}")
    print(f"cache:    {args.cache}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("run: give the command after --")
    image = _image(args)
    spec = RunSpec(
        image=image,
        command=command,
        env=parse_pairs(args.env, "env"),
        mounts=_parse_mounts(args.mount),
        memory_bytes=int(args.memory_gib * GIB),
        shm_bytes=int(args.shm_gib * GIB),
    )
    return _execute(spec, _choose_backend(args.backend, args.cache), args.cache)


def cmd_suite(args: argparse.Namespace) -> int:
    if bool(args.tests) == bool(args.host_tests):
        raise UsageError("suite: give either --tests (paths in the image) or --host-tests (files to mount)")
    image = _image(args)
    scratch = _scratch_dir()
    run_dir, out_dir = scratch / "run", scratch / "out"
    run_dir.mkdir()
    out_dir.mkdir()
    shutil.copyfile(DRIVER, run_dir / "pytest_driver.py")
    shutil.copyfile(SHARD_PLUGIN, run_dir / SHARD_PLUGIN.name)
    mounts = [Mount(run_dir, RUN_DIR), Mount(out_dir, OUT_DIR, read_only=False)]
    targets = list(args.tests)
    if args.host_tests:
        tests_dir = scratch / "tests"
        _stage_tests(args.host_tests, tests_dir)
        mounts.append(Mount(tests_dir, TESTS_DIR))
        targets = [TESTS_DIR]
    selection = ["-m", args.markers] if args.markers else []
    pytest_args = (
        DEFAULT_PYTEST_ARGS + selection + list(args.pytest_arg) + [f"--junitxml={OUT_DIR}/junit.xml", *targets]
    )
    spec = RunSpec(
        image=image,
        command=["python3", f"{RUN_DIR}/pytest_driver.py", "--report", f"{OUT_DIR}/report.json", "--", *pytest_args],
        env={"PYTHONDONTWRITEBYTECODE": "1", suite.EXPECTATION_ENV: args.expect, **_shard_env(),
             **parse_pairs(args.env, "env")},
        mounts=mounts,
        memory_bytes=int(args.memory_gib * GIB),
        shm_bytes=int(args.shm_gib * GIB),
    )
    code = _execute(spec, _choose_backend(args.backend, args.cache), args.cache)
    xml_out = os.environ.get("XML_OUTPUT_FILE")
    if xml_out and (out_dir / "junit.xml").is_file():
        shutil.copyfile(out_dir / "junit.xml", xml_out)
    if args.report_out and (out_dir / "report.json").is_file():
        shutil.copyfile(out_dir / "report.json", args.report_out)
    verdict = suite.judge(suite.load_report(out_dir / "report.json"), args.expect)
    if args.expect == "all-pass" and code != 0:
        raise suite.SuiteError(f"pytest exited {code} inside the image although every test passed")
    print(suite.summary_line(verdict))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    """Empties the runner's caches: podman's project storage and the unpacked rootfs trees."""
    code = 0
    if shutil.which("podman"):
        code = podman_backend.prune(podman_backend.PodmanConfig(args.cache / "podman"))
    shutil.rmtree(args.cache / "rootfs", ignore_errors=True)
    print(f"run_in_image: pruned images in {args.cache / 'podman'} and {args.cache / 'rootfs'}")
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run_in_image.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--layout", action="append", required=True,
        help="OCI layout directory (repeatable: the one holding index.json is used, so Bazel's"
        " $(rootpaths) of an image target can be passed as is)",
    )
    common.add_argument("--blob", action="append", default=[], metavar="DESCRIPTOR=BLOB",
                        help="a layer blob kept outside the layout (tools/oci layer_args format; repeatable)")
    common.add_argument("--backend", choices=("auto", "podman", "bwrap"), default="auto",
                        help="container runtime (default: podman if usable, else bubblewrap)")
    common.add_argument("--cache", type=Path, default=default_cache_root(),
                        help="podman storage/config and unpacked rootfs cache (default: %(default)s)")
    common.add_argument("--memory-gib", type=float, default=16, help="memory cap (default: 16)")
    common.add_argument("--shm-gib", type=float, default=4, help="size of /dev/shm (default: 4)")
    common.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment variable in the container (repeatable)")
    sub = parser.add_subparsers(dest="subcommand", required=True)

    info = sub.add_parser("info", parents=[common], help="show the image and the backend that would run it")
    info.set_defaults(func=cmd_info)

    run = sub.add_parser("run", parents=[common], help="run a command in the image")
    run.add_argument("--mount", action="append", default=[], metavar="HOST:CONTAINER[:ro|rw]",
                     help="bind mount (read-only unless :rw)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    run.set_defaults(func=cmd_run)

    suite_p = sub.add_parser("suite", parents=[common], help="run a pytest suite in the image and judge it")
    suite_p.add_argument("--tests", action="append", default=[], metavar="PATH_IN_IMAGE",
                         help="test file or directory inside the image (repeatable)")
    suite_p.add_argument("--host-tests", nargs="+", default=[], metavar="FILE",
                         help="host test files (relative paths, kept) mounted into the image")
    suite_p.add_argument("--expect", choices=suite.EXPECTATIONS, default="all-pass",
                         help="all-pass: every test passes; stock-bugs: exactly the"
                         f" @{suite.STOCK_MARKER} tests fail; none: record only (see --report-out)")
    suite_p.add_argument("--report-out", type=Path, metavar="FILE",
                         help="also write the JSON report (every test's outcome and markers) here")
    suite_p.add_argument("--markers", metavar="EXPR",
                         help="pytest -m expression selecting the tests, e.g. 'timing' or 'not timing'"
                         " (tests that measure time carry @pytest.mark.timing)")
    suite_p.add_argument("--pytest-arg", action="append", default=[], help="extra pytest argument")
    suite_p.set_defaults(func=cmd_suite)

    prune_p = sub.add_parser("prune", help="remove cached images (podman storage: those no container"
                             " uses; unpacked rootfs trees: all, so not while a bwrap run is going)")
    prune_p.add_argument("--cache", type=Path, default=default_cache_root(), help="default: %(default)s")
    prune_p.set_defaults(func=cmd_prune)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, LayoutError, UnpackError, podman_backend.PodmanError, suite.SuiteError) as err:
        print(f"run_in_image: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
