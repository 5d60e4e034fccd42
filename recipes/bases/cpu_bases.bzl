"""The CPU-test bases: one macro, fed by the CPU_BASES table (one row per SGLang version).

Every base is the same Debian runtime, the wheels both locks share, the version's own wheels and
the torchvision shim, with the same environment; a row says only what differs.
"""

load("//tools/oci:defs.bzl", "oci_image", "oci_structure_test")

# The image environment of every CPU base.
CPU_BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
    "PYTHONUNBUFFERED": "1",
    "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
}

# One row per base: its own wheels layer, the PyPI lock those wheels come from (a release built on
# the base lists it in its evidence), what its description says, and the files its structure test
# checks beyond what every base must (or must not) carry.
CPU_BASES = {
    "0.5.19": struct(
        wheels = ":sglang_cpu_wheels",
        lock = "//third_party/python:sglang_cpu.lock",
        description = "CPU-test base for the GLM-5.3 engine recipes; not for serving.",
        expect_absent = ["/usr/lib/python3/dist-packages/torchvision-0.28.0.dist-info"],
        expect_files = [
            "/usr/bin/python3.11",
            "/usr/lib/python3.11/json/__pycache__/decoder.cpython-311.pyc",
            "/etc/ssl/certs/ca-certificates.crt",
            "/usr/lib/ssl/cert.pem",
            "/etc/passwd",
            "/etc/group",
            "/etc/hosts",
            "/proc",
            "/dev",
            "/tmp",
            "/var/lib/dpkg/status.d/libc6",
            "/usr/lib/python3/dist-packages/sglang/__init__.py",
            "/usr/lib/python3/dist-packages/sglang/__pycache__/__init__.cpython-311.pyc",
        ],
    ),
    "0.5.23": struct(
        wheels = ":sglang_cpu_0_5_23_wheels",
        lock = "//third_party/python:sglang_cpu_0_5_23.lock",
        description = "Candidate CPU-test base for the bump check; not for serving.",
        expect_absent = ["/usr/lib/python3/dist-packages/sglang-0.5.19.dist-info"],
        expect_files = [
            "/usr/lib/python3/dist-packages/sglang-0.5.23.dist-info/METADATA",
            "/usr/lib/python3/dist-packages/sglang/srt/managers/tokenizer_manager.py",
            "/usr/lib/python3/dist-packages/sglang/srt/entrypoints/http_server.py",
        ],
    ),
}

def cpu_base_name(version):
    return "sglang_cpu_" + version.replace(".", "_")

def sglang_cpu_base(version):
    """The base image `sglang_cpu_<version>` of CPU_BASES[version] and its daemon-free structure
    test `sglang_cpu_<version>_structure_test` (reads the config and the layer tars' headers)."""
    row = CPU_BASES[version]
    name = cpu_base_name(version)
    oci_image(
        name = name,
        cmd = ["/usr/bin/python3"],
        env = CPU_BASE_ENV,
        image_name = "glm53-engine/sglang-cpu:" + version,
        labels = {
            "org.opencontainers.image.title": (
                "sglang-cpu %s base (Debian 12, CPython 3.11, torch 2.13.0+cpu)" % version
            ),
            "org.opencontainers.image.description": row.description,
            "org.opencontainers.image.version": version,
        },
        # Least to most often changing.
        tars = [
            ":debian_runtime",
            ":sglang_cpu_shared_wheels",
            row.wheels,
            ":torchvision_shim",
        ],
        workdir = "/",
    )
    oci_structure_test(
        name = name + "_structure_test",
        expect_absent = [
            "/usr/lib/python3/dist-packages/triton/backends/nvidia/lib",
        ] + row.expect_absent + ["/bin/sh"],
        expect_env = {
            "PATH": CPU_BASE_ENV["PATH"],
            "HOME": CPU_BASE_ENV["HOME"],
        },
        expect_files = ["/usr/bin/python3"] + row.expect_files + [
            "/usr/lib/python3/dist-packages/torch/__init__.py",
            "/usr/lib/python3/dist-packages/torchvision/__init__.py",
            "/usr/local/bin/pytest",
        ],
        expect_labels = {"org.opencontainers.image.version": version},
        image = ":" + name,
    )
