"""tools/remote/executor.py: actions run inside the built execution image, never on the host.

The in-image tests use the real //tools/remote:exec_image (its image_files JSON) and real
bubblewrap, the way the conformance bot runs every action.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from tools.remote import executor

# Bazel's --incompatible_strict_action_env PATH: what remote actions get.
ACTION_PATH = "/bin:/usr/bin:/usr/local/bin"


def _scratch() -> Path:
    # In the test's own TEST_TMPDIR: pytest's default base under /tmp keeps three runs' rootfs.
    return Path(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")))


@pytest.fixture(scope="module")
def images() -> executor.ImageSet:
    image = executor.load_image_files(Path(os.environ["EXEC_IMAGE_FILES"]), Path.cwd())
    return executor.ImageSet([image], _scratch())


@pytest.fixture
def tmp_path() -> Path:
    return _scratch()


@pytest.fixture
def reference(images) -> str:
    (digest,) = images.images
    return f"docker://docker.io/nearai/sglang-glm53-rbe@{digest}"


def run(images, reference, tmp_path, arguments, env=None, working_directory=""):
    input_root = tmp_path / "input"
    (input_root / working_directory).mkdir(parents=True, exist_ok=True)
    return executor.run(images, reference, input_root, tmp_path / "tmp", working_directory,
                        env if env is not None else {"PATH": ACTION_PATH}, arguments, timeout=120)


def test_an_env_bash_launcher_runs_python3_and_coreutils(images, reference, tmp_path) -> None:
    # What every Bazel test action is: a `#!/usr/bin/env bash` script (test-setup.sh calls
    # mkdir, sed, grep, find) that execs python3 and writes an output in the input root.
    script = tmp_path / "input" / "pkg" / "launcher.sh"
    script.parent.mkdir(parents=True)
    script.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\nmkdir -p out\n"
        "env python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' | sed 's/^/python /' > out/result.txt\n"
        "find . -name launcher.sh | grep -q launcher && echo found >> out/result.txt\n"
    )
    script.chmod(0o755)
    result = run(images, reference, tmp_path, ["pkg/launcher.sh"])
    assert result.exit_code == 0, result.stderr.decode()
    assert result.image_digest == reference.rpartition("@")[2]
    assert (tmp_path / "input" / "out" / "result.txt").read_text() == "python 3.11\nfound\n"


def test_bash_c_true_and_working_directory(images, reference, tmp_path) -> None:
    result = run(images, reference, tmp_path, ["/bin/bash", "-c", f"true && test \"$PWD\" = {executor.EXECROOT}/a/b"],
                 working_directory="a/b")
    assert result.exit_code == 0, result.stderr.decode()


def test_the_host_is_not_visible(images, reference, tmp_path) -> None:
    # bwrap is on the host's /usr, never in the image.
    assert Path("/usr/bin/bwrap").exists()
    result = run(images, reference, tmp_path, ["/bin/bash", "-c", "test ! -e /usr/bin/bwrap"])
    assert result.exit_code == 0


def test_only_the_commands_environment(images, reference, tmp_path) -> None:
    env = {"PATH": ACTION_PATH, "GLM53_MARKER": "1"}
    result = run(images, reference, tmp_path, ["/usr/bin/env"], env=env)
    # bwrap's --chdir sets PWD, as a shell would.
    assert result.stdout.decode().splitlines() == ["GLM53_MARKER=1", f"PATH={ACTION_PATH}", f"PWD={executor.EXECROOT}"]


def test_no_network(images, reference, tmp_path) -> None:
    probe = "import socket\ntry:\n socket.create_connection(('192.0.2.1', 80), timeout=5)\nexcept OSError as e:\n print(e.errno)\n"
    result = run(images, reference, tmp_path, ["/usr/bin/python3", "-c", probe])
    assert result.stdout.decode().strip() == "101"  # ENETUNREACH: the namespace has only loopback


def test_an_unknown_image_is_refused(images, tmp_path) -> None:
    other = "docker://docker.io/nearai/sglang-glm53-cpu-base@sha256:" + "a" * 64
    with pytest.raises(executor.ImageError, match="is not an image this worker has"):
        run(images, other, tmp_path, ["/bin/true"])


@pytest.mark.parametrize("value", [
    "docker://docker.io/nearai/sglang-glm53-rbe:latest",
    "docker://docker.io/nearai/sglang-glm53-rbe@sha256:abc",
    "docker://docker.io/nearai/sglang-glm53-rbe@sha256:" + "A" * 64,
])
def test_a_reference_without_a_digest_is_refused(value) -> None:
    with pytest.raises(executor.ImageError, match="not pinned by digest"):
        executor.image_digest(value)


def _platform(**props):
    return SimpleNamespace(properties=[SimpleNamespace(name=k.replace("_", "-"), value=v) for k, v in props.items()])


def test_platform_image_prefers_the_action_and_requires_one() -> None:
    assert executor.platform_image(_platform(container_image="a"), _platform(container_image="b")) == "a"
    assert executor.platform_image(_platform(OSFamily="Linux"), _platform(container_image="b")) == "b"
    with pytest.raises(executor.ImageError, match="never runs an action on its host"):
        executor.platform_image(_platform(OSFamily="Linux"), _platform())


def test_a_command_that_never_started_is_a_sandbox_error(images, reference, tmp_path) -> None:
    # Not exit code 1 of the action: a program missing from the image, or a mount that failed.
    with pytest.raises(executor.SandboxError, match="execvp /usr/bin/podman"):
        run(images, reference, tmp_path, ["/usr/bin/podman", "info"])
    with pytest.raises(executor.SandboxError, match="Can't find source path"):
        executor.run(images, reference, tmp_path / "missing", tmp_path / "tmp", "", {}, ["/bin/true"], timeout=60)


def test_the_commands_exit_code_is_returned(images, reference, tmp_path) -> None:
    result = run(images, reference, tmp_path, ["/bin/bash", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
