"""End to end: the runner's suite mode on a small image built from the host's Python.

The stock image carries a fake `sglang` with a bug; the patched image adds a layer fixing it
plus the tests under /usr/share/glm53-engine/<recipe>/tests, like the real engine images.
GLM53_TEST_BACKEND selects podman or bwrap (the BUILD file makes one target per backend).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.podman import run_in_image, suite
from tools.podman.tests.host_image import layer_of, python_rootfs, write_layout, write_tree

BACKEND = os.environ.get("GLM53_TEST_BACKEND", "bwrap")
SITE = "usr/lib/python3/dist-packages"
TESTS = {
    "v1/conftest.py": (
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'detects_stock_bug: fails on stock')\n"
    ),
    "v1/test_clamp.py": (
        "import pytest, sglang\n\n"
        "@pytest.mark.detects_stock_bug\n"
        "def test_clamp_limits():\n    assert sglang.clamp(10, 3) == 3\n\n"
        "def test_clamp_small():\n    assert sglang.clamp(1, 3) == 1\n"
    ),
    "v3/test_isolation.py": (
        "import os, socket\n\n"
        "def test_only_loopback():\n    assert [n for _, n in socket.if_nameindex()] == ['lo']\n\n"
        "def test_env_from_image():\n    assert os.environ['GLM53_FROM_IMAGE'] == 'yes'\n"
    ),
    "v3/test_timed.py": (
        "import pytest\n\n"
        "@pytest.mark.timing\n"
        "def test_measures_time():\n    pass\n"
    ),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("images")
    base = layer_of(python_rootfs(tmp / "rootfs"))
    stock = layer_of(write_tree(tmp / "stock", {f"{SITE}/sglang/__init__.py": "def clamp(x, limit):\n    return x\n"}))
    patch_files = {f"{SITE}/sglang/__init__.py": "def clamp(x, limit):\n    return min(x, limit)\n"}
    patch_files.update({f"usr/share/glm53-engine/glm53_test/tests/{k}": v for k, v in TESTS.items()})
    patch = layer_of(write_tree(tmp / "patch", patch_files))
    env = {"GLM53_FROM_IMAGE": "yes"}
    write_layout(tmp / "stock.oci", [base, stock], env=env)
    write_layout(tmp / "patched.oci", [base, stock, patch], env=env)
    host_tests = write_tree(tmp / "host", {f"tests/{k}": v for k, v in TESTS.items()})
    return {"stock": tmp / "stock.oci", "patched": tmp / "patched.oci", "host_tests": host_tests}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch) -> None:
    # bwrap unpacks into a per-test cache (the sandbox cannot write ~/.cache); podman keeps
    # the project's real storage so its layers are shared with the recipe tests.
    if BACKEND == "bwrap":
        monkeypatch.setenv("GLM53_ENGINE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _suite(layout: Path, *extra: str) -> int:
    return run_in_image.main(["suite", "--backend", BACKEND, "--layout", str(layout), *extra])


def test_patched_image_passes_its_shipped_suite(images) -> None:
    assert _suite(images["patched"], "--tests", "/usr/share/glm53-engine/glm53_test/tests") == 0


@pytest.mark.parametrize("markers, tests", [("not timing", 4), ("timing", 1)])
def test_markers_select_the_deterministic_or_the_timing_tests(
    images, capsys, markers: str, tests: int
) -> None:
    # Deselected tests are neither run nor judged "not-run".
    code = _suite(images["patched"], "--tests", "/usr/share/glm53-engine/glm53_test/tests", "--markers", markers)
    assert code == 0
    assert f"in-image suite OK (all-pass): {tests} tests: {tests} passed;" in capsys.readouterr().out


def test_shards_of_a_sharded_target_split_the_suite(images, capsys, monkeypatch, tmp_path: Path) -> None:
    # As Bazel runs a target with shard_count = 2: each shard runs and judges only its own
    # tests, together they run each test once, and the runner touches the status file.
    status = tmp_path / "shard_status"
    monkeypatch.setenv("TEST_SHARD_STATUS_FILE", str(status))
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "2")
    counts = []
    for index in range(2):
        monkeypatch.setenv("TEST_SHARD_INDEX", str(index))
        code = _suite(images["patched"], "--tests", "/usr/share/glm53-engine/glm53_test/tests",
                      "--report-out", str(tmp_path / f"report{index}.json"))
        assert code == 0, capsys.readouterr()
        counts.append(len(suite.load_report(tmp_path / f"report{index}.json")))
    assert counts == [3, 2], counts
    nodeids = [r.nodeid for i in range(2) for r in suite.load_report(tmp_path / f"report{i}.json")]
    assert len(nodeids) == len(set(nodeids)) == 5, nodeids  # the suite's 5 tests, each once
    assert status.exists(), "Bazel reads the touched status file as 'this runner shards'"


def test_stock_image_fails_exactly_the_marked_tests(images, monkeypatch) -> None:
    monkeypatch.chdir(images["host_tests"])
    files = [f"tests/{k}" for k in TESTS]
    assert _suite(images["stock"], "--host-tests", *files, "--expect", "stock-bugs") == 0
    # The same expectation on the patched image must fail: the marked test passes there.
    assert _suite(images["patched"], "--host-tests", *files, "--expect", "stock-bugs") == 1
    # And "all pass" on stock must fail.
    assert _suite(images["stock"], "--host-tests", *files) == 1


def test_run_passes_the_exit_code_and_caps_memory(images) -> None:
    layout = ["--backend", BACKEND, "--layout", str(images["stock"])]
    assert run_in_image.main(["run", *layout, "--", "python3", "-c", "raise SystemExit(7)"]) == 7
    probe = (
        "import pathlib, resource, sys\n"
        "cg = pathlib.Path('/sys/fs/cgroup/memory/memory.limit_in_bytes')\n"
        "limit = int(cg.read_text()) if cg.exists() else resource.getrlimit(resource.RLIMIT_AS)[0]\n"
        "sys.exit(0 if limit == 3 << 30 else 1)\n"
    )
    assert run_in_image.main(["run", *layout, "--memory-gib", "3", "--", "python3", "-c", probe]) == 0


def test_shm_size(images) -> None:
    layout = ["--backend", BACKEND, "--layout", str(images["stock"]), "--shm-gib", "1"]
    probe = "import os, sys; st = os.statvfs('/dev/shm'); sys.exit(0 if st.f_blocks * st.f_frsize == 1 << 30 else 1)"
    assert run_in_image.main(["run", *layout, "--", "python3", "-c", probe]) == 0


def test_thin_layout_with_external_blobs(images, tmp_path: Path) -> None:
    """tools/oci layouts keep base layer blobs outside: they come in as DESCRIPTOR=BLOB."""
    import json
    import shutil

    thin = tmp_path / "thin"
    shutil.copytree(images["patched"], thin)
    manifest_digest = json.loads((thin / "index.json").read_text())["manifests"][0]["digest"]
    manifest = json.loads((thin / "blobs/sha256" / manifest_digest.split(":")[1]).read_text())
    blob_args = []
    for i, layer in enumerate(manifest["layers"][:-1]):  # keep only the top layer embedded
        blob = thin / "blobs/sha256" / layer["digest"].split(":")[1]
        moved = tmp_path / f"layer{i}.tar"
        blob.rename(moved)
        descriptor = tmp_path / f"layer{i}.json"
        descriptor.write_text(json.dumps(layer))
        blob_args += ["--blob", f"{descriptor}={moved}"]
    base = ["suite", "--backend", BACKEND, "--layout", str(thin), "--tests", "/usr/share/glm53-engine/glm53_test/tests"]
    assert run_in_image.main(base) == 1  # blobs missing: a clear error, not a half image
    assert run_in_image.main(base + blob_args) == 0


def test_auto_falls_back_to_bubblewrap(images, monkeypatch, capsys) -> None:
    from tools.podman import podman_backend

    monkeypatch.setattr(podman_backend, "unavailable_reason", lambda config: "podman is not installed")
    monkeypatch.setenv("GLM53_ENGINE_CACHE", str(images["stock"].parent / "fallback-cache"))
    assert run_in_image.main(["run", "--layout", str(images["stock"]), "--", "python3", "-c", "pass"]) == 0
    err = capsys.readouterr().err
    assert "podman unavailable (podman is not installed); using bubblewrap" in err
    assert "backend=bwrap" in err


def test_missing_layout_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert run_in_image.main(["info", "--layout", str(tmp_path)]) == 1
    assert "exactly one OCI layout directory" in capsys.readouterr().err
