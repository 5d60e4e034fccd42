"""Mutations of the runtime rules (Compose's canonical model), each through `check`.

Part 1: the drifts the issue made by hand on copies of the long-context file that no rule caught.
Part 2: one mutation per further rule.
Part 3: generator-level edits: the same edit in every committed file (what a change of the
generator produces), which the whole-file derivation rule cannot see by construction.
Every test asserts the runtime validator's exact findings (rule name and dotted path).
"""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path
from typing import Any, Callable

import pytest

from deploy.validators.glm53_contract import W4AFP8_LONG_CONTEXT
from deploy.validators.tests.harness import (CheckInputs, assert_generator_edit_caught,
                                             engine_names, generator_edit, load, replace_once,
                                             run_check)

R1, R2 = (r.name for r in W4AFP8_LONG_CONTEXT.replicas)
PROXY = W4AFP8_LONG_CONTEXT.proxy
TIER = "the glm53-h200 tier table requires"
HC = "/root/.cache/huggingface"
VOLUMES = f"[huggingface_cache:{HC}, kernel_cache:/root/.cache/kernels]"
PROBES = ("/metrics", "/metrics/", "/metrics/x", "/metricsz", "//metrics", "/%6Detrics",
          "/v1/metrics", "/v1/metrics/", "/v1/metrics/x", "/v1/metricsz")
BLOCK_HINT = ("block them by prefix: `location ^~ /metrics { return 404; }` and "
              "`location ^~ /v1/metrics { return 404; }`")


def long_context(ci: CheckInputs) -> Path:
    [path] = [p for p in ci.compose_files if p.name.endswith("LongContext.yaml")]
    return path


def runtime_errors(ci: CheckInputs, *files: Path) -> list[str]:
    result = run_check(ci, *files)
    assert result.returncode == 1, result.output
    return result.by_validator().get("runtime", [])


def v3_patches(ci: CheckInputs) -> str:
    declared = json.loads((ci.series_dir / "v3" / "series.json").read_text())["patches"]
    return ", ".join(Path(p["file"]).stem for p in declared)


def nginx_content(doc: dict[str, Any]) -> str:
    return doc["configs"]["nginx_conf"]["content"]


def tls_server(text: str) -> tuple[int, int]:
    """[start, end) of the public TLS server block in an nginx config."""
    listen = text.index("listen 443 ssl;")
    start = text.rindex("server {", 0, listen)
    return start, text.index("\n}\n", listen) + 3


def line_in(text: str, needle: str, start: int = 0) -> int:
    return text[:text.index(needle, start)].count("\n") + 1


# --- part 1: the drifts no rule caught ----------------------------------------------------------

def test_ipc_host_removed(check_inputs, mutate_text) -> None:
    copy = mutate_text(long_context(check_inputs), lambda t: replace_once(
        t, "  runtime: nvidia\n  ipc: host\n", "  runtime: nvidia\n"))
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R}.ipc: engine-runtime: is unset, {TIER} \"host\"" for R in (R1, R2)]


def test_memlock_ulimit_removed(check_inputs, mutate_text) -> None:
    copy = mutate_text(long_context(check_inputs),
                       lambda t: replace_once(t, "    memlock: -1\n", ""))
    nofile = '{"nofile": {"soft": 65535, "hard": 65535}}'
    want = '{"memlock": -1, "nofile": {"soft": 65535, "hard": 65535}}'
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R}.ulimits: engine-runtime: is {nofile}, {TIER} {want}"
        for R in (R1, R2)]


def test_stop_grace_period_10s(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R2]["stop_grace_period"] = "10s"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.stop_grace_period: engine-runtime: replicas differ: 10s here, "
        f"300s on {R1}",
        f"{copy}: services.{R2}.stop_grace_period: engine-runtime: is 10s, {TIER} 300s"]


def test_runtime_runc_without_init(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R2]["runtime"] = "runc"
        del doc["services"][R2]["init"]

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.runtime: engine-runtime: replicas differ: \"runc\" here, "
        f"\"nvidia\" on {R1}",
        f"{copy}: services.{R2}.runtime: engine-runtime: is \"runc\", {TIER} \"nvidia\"",
        f"{copy}: services.{R2}.init: engine-runtime: replicas differ: unset here, true on {R1}",
        f"{copy}: services.{R2}.init: engine-runtime: is unset, {TIER} true"]


def test_restart_no(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R1]["restart"] = "no"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R1}.restart: engine-runtime: is \"no\", {TIER} \"unless-stopped\"",
        f"{copy}: services.{R2}.restart: engine-runtime: replicas differ: \"unless-stopped\" "
        f"here, \"no\" on {R1}"]


def test_kernel_cache_volume_dropped(check_inputs, mutate_text) -> None:
    copy = mutate_text(long_context(check_inputs), lambda t: replace_once(
        t, "    - kernel_cache:/root/.cache/kernels\n", ""))
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R}.volumes: engine-runtime: is [huggingface_cache:{HC}], {TIER} "
        f"{VOLUMES}" for R in (R1, R2)]


def test_r2_loses_offload_marker(check_inputs, mutate_text) -> None:
    copy = mutate_text(long_context(check_inputs), lambda t: replace_once(
        t, "qsplit-offloop-v3-host650g", "qsplit-host650g", count=3))
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.labels.nearai.otel.config_variant: engine-identity: "
        "config_variant lacks `offloop-v3-` but the image's release //recipes:glm53_v3 (series "
        f"v3) carries series v3's patches ({v3_patches(check_inputs)})"]


def test_r1_gains_offload_marker(check_inputs, mutate_text) -> None:
    copy = mutate_text(long_context(check_inputs), lambda t: replace_once(
        t, "c8192-qsplit-hicache", "c8192-qsplit-offloop-v3-hicache", count=3))
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R1}.labels.nearai.otel.config_variant: engine-identity: "
        "config_variant has `offloop-v3-` but the image's release //recipes:glm53_v2 (series "
        f"v2) does not carry series v3's patches ({v3_patches(check_inputs)})"]


def test_r2_publishes_a_host_port(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R2]["ports"] = ["8010:8000"]

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.ports[0]: engine-no-host-port: engine publishes host port 8010 "
        "-> 8000, bypassing the inference proxy; remove the mapping"]


def test_misspelled_upstream_once_metrics_blocks_are_gone(check_inputs, mutate) -> None:
    holder: dict[str, int] = {}

    def drift(doc: dict[str, Any]) -> None:
        text = nginx_content(doc)
        start, end = tls_server(text)
        server = text[start:end]
        server, count = re.subn(r"    location \^~ (/v1)?/metrics \{\n\s*return 404;\n    \}\n",
                                "", server)
        assert count == 2
        server = replace_once(server, "proxy-glm53", "proxy-glm35")
        text = text[:start] + server + text[end:]
        holder["server"] = line_in(text, "listen 443 ssl;") - 1
        holder["pass"] = line_in(text, "proxy_pass", text.index("proxy-glm35"))
        doc["configs"]["nginx_conf"]["content"] = text

    copy = mutate(long_context(check_inputs), drift)
    leaked = ", ".join(f"{p} -> unknown host 'proxy-glm35'" for p in PROBES)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: configs.nginx_conf.content: public-routes: line {holder['pass']} (location /) "
        "proxies to 'proxy-glm35', which is not a service of this file (misspelled upstream?)",
        f"{copy}: configs.nginx_conf.content: public-metrics: server block at line "
        f"{holder['server']} (listen 443 ssl, host port 8444) proxies metrics paths through a "
        f"real nginx: {leaked}; {BLOCK_HINT}"]


# --- part 2: one mutation per further rule -----------------------------------------------------

def test_exact_metrics_location_is_not_enough(check_inputs, mutate) -> None:
    holder: dict[str, int] = {}

    def drift(doc: dict[str, Any]) -> None:
        text = nginx_content(doc)
        start, end = tls_server(text)
        server = text[start:end].replace("location ^~ /metrics", "location = /metrics")
        server = server.replace("location ^~ /v1/metrics", "location = /v1/metrics")
        text = text[:start] + server + text[end:]
        holder["server"] = line_in(text, "listen 443 ssl;") - 1
        doc["configs"]["nginx_conf"]["content"] = text

    copy = mutate(long_context(check_inputs), drift)
    # What a real nginx does with `location =`: the exact paths (and //metrics, /%6Detrics,
    # which nginx normalizes to /metrics) get the 404, everything below or beside them passes.
    leaked = ", ".join(f"{p} -> {PROXY}" for p in ("/metrics/", "/metrics/x", "/metricsz",
                                                   "/v1/metrics/", "/v1/metrics/x",
                                                   "/v1/metricsz"))
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: configs.nginx_conf.content: public-metrics: server block at line "
        f"{holder['server']} (listen 443 ssl, host port 8444) proxies metrics paths through a "
        f"real nginx: {leaked}; {BLOCK_HINT}"]


def test_debug_route_to_an_engine_on_the_public_listener(check_inputs, mutate) -> None:
    holder: dict[str, int] = {}

    def drift(doc: dict[str, Any]) -> None:
        text = replace_once(nginx_content(doc), "    keepalive_requests 1000000;\n", (
            "    keepalive_requests 1000000;\n"
            f"    location /debug {{\n        proxy_pass http://{R1}:8000;\n    }}\n"))
        holder["pass"] = line_in(text, f"proxy_pass http://{R1}")
        doc["configs"]["nginx_conf"]["content"] = text

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: configs.nginx_conf.content: public-routes: line {holder['pass']} "
        f"(location /debug) on public listener port 443 proxies to {R1}, not an inference "
        f"proxy; public listeners route only to {PROXY}"]


def test_host_port_published_twice(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        ports = doc["services"]["glm53-soak-relay"]["ports"]
        ports[1] = "8444:8009"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.nginx.ports[1]: host-port-unique: host port 8444/tcp is already "
        "published by services.glm53-soak-relay.ports[1]; two services cannot bind one host port "
        "(pick a free port)"]


def _gpus(doc: dict[str, Any], name: str) -> list[str]:
    return doc["services"][name]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]


def test_gpu_outside_the_host_inventory(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        _gpus(doc, R2)[-1] = "8"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.deploy.resources.reservations.devices: gpu-inventory: GPU id "
        "'8' does not exist on an H200 host (ids 0-7)",
        # and DCGM, which reserves the host's eight, does not watch it
        f"{copy}: services.dcgm-glm53.deploy.resources.reservations.devices: gpu-monitor: does "
        f"not reserve GPU 8, which {R2} use; their GPU metrics would be missing"]


def test_gpu_reserved_by_two_engines(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        _gpus(doc, R2)[0] = "3"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.deploy.resources.reservations.devices: gpu-inventory: GPU 3 is "
        f"already reserved by engine {R1}; engine GPU sets must be disjoint"]


def test_engine_without_healthcheck(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        del doc["services"][R1]["healthcheck"]

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R1}.healthcheck: engine-healthcheck: engine has no healthcheck; "
        "probe http://127.0.0.1:8000/health with a timeout under 3s"]


def test_engine_healthcheck_timeout_not_under_the_proxy(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R2]["healthcheck"]["timeout"] = "3s"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.healthcheck.timeout: engine-healthcheck: timeout 3s must be "
        "under the inference proxy's 3s health-probe timeout"]


def test_engine_healthcheck_probes_another_path(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        test = doc["services"][R1]["healthcheck"]["test"]
        test[-1] = replace_once(test[-1], "/health'", "/v1/models'")

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R1}.healthcheck.test: engine-healthcheck: the test does not request "
        "http://127.0.0.1:8000/health"]


def test_sidecar_without_memory_limit(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        del doc["services"]["nginx"]["mem_limit"]

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.nginx.mem_limit: sidecar-memory: sidecar has no memory limit; a leak "
        "would take the engines' host RAM (set mem_limit)"]


def test_engine_image_label_not_from_the_digest(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R1]["labels"]["nearai.otel.engine_image"] = "0" * 12

    copy = mutate(long_context(check_inputs), drift)
    digest = load(long_context(check_inputs))["services"][R1]["image"].split(":")[-1][:12]
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R1}.labels.nearai.otel.engine_image: engine-identity: engine_image "
        f"'000000000000' is not the first 12 hex of the image digest ({digest})"]


def test_config_variant_chunk_not_the_argv(check_inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        command = doc["services"][R2]["command"]
        command[command.index("--chunked-prefill-size") + 1] = "4096"

    copy = mutate(long_context(check_inputs), drift)
    assert runtime_errors(check_inputs, copy) == [
        f"{copy}: services.{R2}.labels.nearai.otel.config_variant: engine-identity: "
        "config_variant lacks `c4096-` but the service runs --chunked-prefill-size"]


def _token(seed: int, prefix: str, length: int) -> str:
    rng = random.Random(seed)
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


def test_secrets_found_by_value_and_never_printed(check_inputs, mutate) -> None:
    hf = _token(16, "hf_", 34)
    github = _token(17, "ghp_", 36)

    def drift(doc: dict[str, Any]) -> None:
        doc["services"][PROXY]["environment"]["EXTRA_UPSTREAM"] = hf
        doc["services"]["model-proxy-registrar"]["environment"]["PROXY_TOKEN"] = "hunter2"
        doc["configs"]["nginx_conf"]["content"] = replace_once(
            nginx_content(doc), "    keepalive_requests 1000000;\n",
            f"    keepalive_requests 1000000;\n    add_header X-Build \"{github}\";\n")

    copy = mutate(long_context(check_inputs), drift)
    result = run_check(check_inputs, copy)
    # First, and without assertion introspection, so a failure cannot print a value either.
    leaked = [i for i, value in enumerate((hf, github, "hunter2")) if value in result.output]
    assert not leaked, f"secret values #{leaked} appear in the output (not shown)"
    assert result.returncode == 1
    hint = "take it from the host's environment as ${VAR:?message}"
    assert result.by_validator()["runtime"] == [
        f"{copy}: configs.nginx_conf.content: secret-by-value: looks like a credential (Base64 "
        f"High Entropy String, GitHub Token; value not shown); {hint}",
        f"{copy}: services.{PROXY}.environment.EXTRA_UPSTREAM: secret-by-value: looks like a "
        f"credential (Base64 High Entropy String, Hugging Face Token; value not shown); {hint}",
        f"{copy}: services.model-proxy-registrar.environment.PROXY_TOKEN: secret-by-value: a "
        f"credential-named variable holds a literal (value not shown); {hint}"]
    # The service contract that rejects the literal token says so without printing it.
    assert (f"{copy}: services.model-proxy-registrar.environment.PROXY_TOKEN: registrar must "
            "take PROXY_TOKEN from the host: `PROXY_TOKEN: ${PROXY_TOKEN}` (found <a literal of "
            "7 characters, not shown>)") in result.by_validator()["service-contracts"]


# --- part 3: generator-level edits -------------------------------------------------------------

def test_generator_drops_ipc_host(check_inputs, tmp_path) -> None:
    files = generator_edit(check_inputs, tmp_path, lambda t, _: replace_once(
        t, "  runtime: nvidia\n  ipc: host\n", "  runtime: nvidia\n"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.{e}.ipc: engine-runtime: is unset, {TIER} \"host\""
        for e in engine_names(p)])


def test_generator_engine_grace_5s(check_inputs, tmp_path) -> None:
    files = generator_edit(check_inputs, tmp_path, lambda t, _: replace_once(
        t, "\n  stop_grace_period: 5m\n", "\n  stop_grace_period: 5s\n"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.{e}.stop_grace_period: engine-runtime: is 5s, {TIER} 300s"
        for e in engine_names(p)])


def test_generator_registrar_healthcheck_1h(check_inputs, tmp_path) -> None:
    files = generator_edit(check_inputs, tmp_path, lambda t, _: replace_once(
        t, "      interval: 30s\n", "      interval: 1h\n"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.model-proxy-registrar.healthcheck.interval: healthcheck-bounds: interval "
        "1h0m0s exceeds the tier's 60s; a failure would go unnoticed that long"])


def test_generator_soak_relay_on_host_port_8000(check_inputs, tmp_path) -> None:
    files = generator_edit(check_inputs, tmp_path, lambda t, _: replace_once(
        t, '- "8008:8008"', '- "8000:8008"'))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.nginx.ports[0]: host-port-unique: host port 8000/tcp is already "
        "published by services.glm53-soak-relay.ports[0]; two services cannot bind one host "
        "port (pick a free port)"])


def test_generator_debug_route_to_an_engine(check_inputs, tmp_path) -> None:
    def edit(text: str, path: Path) -> str:
        first = engine_names(path)[0]
        return replace_once(text, "          keepalive_requests 1000000;\n", (
            "          keepalive_requests 1000000;\n"
            f"          location /debug {{\n              proxy_pass http://{first}:8000;\n"
            "          }\n"))

    files = generator_edit(check_inputs, tmp_path, edit)

    def expected(path: Path) -> list[str]:
        first = engine_names(path)[0]
        content = nginx_content(load(path))
        return [f"{path}: configs.nginx_conf.content: public-routes: line "
                f"{line_in(content, f'proxy_pass http://{first}')} (location /debug) on public "
                f"listener port 443 proxies to {first}, not an inference proxy; public listeners "
                f"route only to {PROXY}"]

    assert_generator_edit_caught(check_inputs, files, expected)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_no_false_positive_on_each_committed_file(check_inputs, index) -> None:
    files = check_inputs.compose_files
    if index >= len(files):
        pytest.skip("fewer committed files")
    result = run_check(check_inputs, files[index])
    assert result.returncode == 0, result.output
