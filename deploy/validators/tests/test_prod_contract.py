"""The GLM-5.3 long-context production contract, each rule proven by a drift it must catch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deploy.validators.compose_doc import command_argv
from deploy.validators.glm53_contract import W4AFP8_LONG_CONTEXT as CONTRACT
from deploy.validators import prod_contract
from deploy.validators.tests.harness import Inputs, run_in_process

R1, R2 = (r.name for r in CONTRACT.replicas)
QSPLIT = "SGLANG_DSA_INDEXER_QSPLIT"
SPLIT_RULE_1 = (f"split gate: --chunked-prefill-size 16384 requires {QSPLIT}=1 (without the DSA "
                "indexer query split a concurrent long-prefill burst left 0.04-0.65 GB free); set "
                f"{QSPLIT}=1 or use --chunked-prefill-size 8192")


def contract(inputs: Inputs, *files: Path, source: Path | None = None):
    args: list[str | Path] = []
    for record in inputs.releases:
        args += ["--release", record]
    if source is not None:
        args += ["--source", source]
    # In this process: one case is one short run (test_loading.py runs the CLI's own entry).
    return run_in_process(prod_contract.main, *args, *files)


def release(inputs: Inputs, series: str) -> dict[str, Any]:
    [record] = [json.loads(p.read_text()) for p in inputs.releases
                if json.loads(p.read_text())["series"] == series]
    return record


def set_flag(doc: dict[str, Any], service: str, flag: str, value: str) -> None:
    argv = command_argv(doc["services"][service]["command"])
    i = argv.index(flag)
    argv[i + 1] = value
    doc["services"][service]["command"] = argv


def test_committed_file_passes(inputs: Inputs) -> None:
    result = contract(inputs, inputs.long_context, source=inputs.source)
    assert result.returncode == 0, result.output
    assert result.stdout.strip() == f"glm53-prod-contract: OK ({inputs.long_context})"


def test_service_renamed_reports_missing_and_unexpected(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"]["dcgm-exporter"] = doc["services"].pop("dcgm-glm53")

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.dcgm-glm53: missing service",
        f"{copy}: services.dcgm-exporter: unexpected service: the {CONTRACT.deployment} file runs "
        "exactly "
        + ", ".join(CONTRACT.services)]


def test_chunk_drift(inputs: Inputs, mutate) -> None:
    copy = mutate(inputs.long_context,
                  lambda doc: set_flag(doc, R1, "--chunked-prefill-size", "4096"))
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{R1}.command: drifted token: `--chunked-prefill-size 4096`, contract "
        "requires `--chunked-prefill-size 8192`"]


def test_dist_init_collision(inputs: Inputs, mutate) -> None:
    r1_addr = CONTRACT.replicas[0].dist_init
    copy = mutate(inputs.long_context, lambda doc: set_flag(doc, R2, "--dist-init-addr", r1_addr))
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{R2}.command: drifted token: `--dist-init-addr {r1_addr}`, contract "
        f"requires `--dist-init-addr {CONTRACT.replicas[1].dist_init}`"]


def test_pdi_swapped_between_replicas(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        set_flag(doc, R1, "--prefill-decode-interval", "2")
        set_flag(doc, R2, "--prefill-decode-interval", "1")

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{R1}.command: drifted token: `--prefill-decode-interval 2`, contract "
        "requires `--prefill-decode-interval 1`",
        f"{copy}: services.{R2}.command: drifted token: `--prefill-decode-interval 1`, contract "
        "requires `--prefill-decode-interval 2`"]


def test_stray_fp8_only_flag(inputs: Inputs, mutate) -> None:
    """`--moe-runner-backend deep_gemm` belongs to the FP8 engines, not the W4AFP8 ones."""
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R2]["command"] = command_argv(doc["services"][R2]["command"]) + [
            "--moe-runner-backend", "deep_gemm"]

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{R2}.command: drifted token: unexpected `--moe-runner-backend deep_gemm`"]


def test_flag_given_twice(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R1]["command"] = command_argv(doc["services"][R1]["command"]) + [
            "--max-running-requests", "32"]

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.errors() == [
        f"{copy}: services.{R1}.command: drifted token: `--max-running-requests` given 2 times"]


def test_switch_removed_and_order_changed(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        argv = command_argv(doc["services"][R1]["command"])
        argv.remove("--enable-metrics")
        doc["services"][R1]["command"] = argv

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.errors() == [
        f"{copy}: services.{R1}.command: drifted token: missing `--enable-metrics`"]

    def reorder(doc: dict[str, Any]) -> None:
        argv = command_argv(doc["services"][R1]["command"])
        i = argv.index("--tp-size")
        argv[i:i + 4] = argv[i + 2:i + 4] + argv[i:i + 2]
        doc["services"][R1]["command"] = argv

    copy = mutate(inputs.long_context, reorder)
    result = contract(inputs, copy)
    index = CONTRACT.argv(CONTRACT.replicas[0]).index("--tp-size")
    assert result.errors() == [
        f"{copy}: services.{R1}.command[{index}]: argv order differs from the contract: "
        "`--ep-size` where the template has `--tp-size`"]


def test_environment_drift(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R2]["environment"]["SGLANG_HICACHE_CUDA_HOST_MEMORY"] = "0"

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    want = CONTRACT.env_template["SGLANG_HICACHE_CUDA_HOST_MEMORY"]
    assert result.errors() == [
        f"{copy}: services.{R2}.environment.SGLANG_HICACHE_CUDA_HOST_MEMORY: is '0', contract "
        f"requires '{want}'"]


def test_forbidden_variable_on_a_sidecar(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][CONTRACT.proxy]["environment"]["SGLANG_ADMISSION_RESERVE_MIN_WAIT_S"] = "5"

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{CONTRACT.proxy}.environment.SGLANG_ADMISSION_RESERVE_MIN_WAIT_S: "
        "forbidden variable: SGLANG_ADMISSION_RESERVE_MIN_WAIT_S must not be set anywhere "
        "(admission-reserve knobs are not rank-deterministic; MIN_WAIT_S crashed the engine)"]


def test_forbidden_variable_on_an_engine(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R1]["environment"]["SGLANG_ADMISSION_RESERVE_FIT"] = "1"

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{R1}.environment.SGLANG_ADMISSION_RESERVE_FIT: unexpected variable "
        "(value '1')",
        f"{copy}: services.{R1}.environment.SGLANG_ADMISSION_RESERVE_FIT: forbidden variable: "
        "SGLANG_ADMISSION_RESERVE_FIT must not be set anywhere (admission-reserve knobs are not "
        "rank-deterministic; MIN_WAIT_S crashed the engine)"]


def test_gpu_ids_swapped(inputs: Inputs, mutate) -> None:
    def devices(doc: dict[str, Any], name: str) -> dict[str, Any]:
        return doc["services"][name]["deploy"]["resources"]["reservations"]["devices"][0]

    def drift(doc: dict[str, Any]) -> None:
        a, b = devices(doc, R1), devices(doc, R2)
        a["device_ids"], b["device_ids"] = b["device_ids"], a["device_ids"]

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    one, two = (list(r.device_ids) for r in CONTRACT.replicas)
    assert result.errors() == [
        f"{copy}: services.{R1}.deploy.resources.reservations.devices: GPU device_ids {two} but "
        f"replica 1 owns {one}",
        f"{copy}: services.{R2}.deploy.resources.reservations.devices: GPU device_ids {one} but "
        f"replica 2 owns {two}"]


def test_proxy_backends_drop_a_replica(inputs: Inputs, mutate) -> None:
    urls = f"${{{CONTRACT.backend_urls_var}:-http://{R1}:8000}}"

    def drift(doc: dict[str, Any]) -> None:
        doc["services"][CONTRACT.proxy]["environment"]["VLLM_BACKEND_URLS"] = urls

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    want = f"${{{CONTRACT.backend_urls_var}:-http://{R1}:8000,http://{R2}:8000}}"
    assert result.errors() == [
        f"{copy}: services.{CONTRACT.proxy}.environment.VLLM_BACKEND_URLS: proxy backends "
        f"'{urls}' must be exactly the replicas, host-overridable: '{want}'"]


# --- the split gate, each rule in both directions --------------------------------------------

def test_split_gate_chunk_16384_without_split_fails(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        set_flag(doc, R2, "--chunked-prefill-size", "16384")
        del doc["services"][R2]["environment"][QSPLIT]

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert f"{copy}: services.{R2}.environment.{QSPLIT}: {SPLIT_RULE_1}" in result.errors()


def test_split_gate_chunk_16384_with_split_passes_the_gate(inputs: Inputs, mutate) -> None:
    """Only the contract's chunk drift is reported: the gate itself is satisfied."""
    copy = mutate(inputs.long_context,
                  lambda doc: set_flag(doc, R2, "--chunked-prefill-size", "16384"))
    result = contract(inputs, copy)
    assert result.errors() == [
        f"{copy}: services.{R2}.command: drifted token: `--chunked-prefill-size 16384`, contract "
        "requires `--chunked-prefill-size 8192`"]


def test_split_gate_split_on_v1_image_fails(inputs: Inputs, mutate) -> None:
    v1, v2 = release(inputs, "v1"), release(inputs, "v2")
    v1_image = f"{v1['repository']}@{v1['digest']}"
    copy = mutate(inputs.long_context, lambda doc: doc["services"][R1].update(image=v1_image))
    result = contract(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{R1}.image: image '{v1_image}' is not {CONTRACT.replicas[0].recipe}'s "
        f"release {v2['repository']}@{v2['digest']}",
        f"{copy}: services.{R1}.image: split gate: {QSPLIT}=1 requires an image whose release "
        f"carries the dsa-indexer-qsplit patch; {v1['recipe']} (series v1) does not (v2 and v3 "
        "do): pin a v2/v3 release or drop the split"]


def test_split_gate_v1_image_without_split_passes_the_gate(inputs: Inputs, mutate) -> None:
    v1 = release(inputs, "v1")
    v1_image = f"{v1['repository']}@{v1['digest']}"

    def drift(doc: dict[str, Any]) -> None:
        doc["services"][R1]["image"] = v1_image
        del doc["services"][R1]["environment"][QSPLIT]

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy)
    assert not [e for e in result.errors() if "split gate" in e], result.errors()
    assert f"{copy}: services.{R1}.environment.{QSPLIT}: missing, contract requires '1'" in \
        result.errors()


def test_split_gate_v3_image_qualifies(inputs: Inputs, mutate) -> None:
    """v3 carries the split patch too: moving r1 to v3 trips only the release pin."""
    v3 = release(inputs, "v3")
    v3_image = f"{v3['repository']}@{v3['digest']}"
    copy = mutate(inputs.long_context, lambda doc: doc["services"][R1].update(image=v3_image))
    result = contract(inputs, copy)
    assert [e.split(": ", 2)[1] for e in result.errors()] == [f"services.{R1}.image"]
    assert "split gate" not in result.output


def test_split_gate_unrecorded_image(inputs: Inputs, mutate) -> None:
    image = "docker.io/nearai/sglang-glm53@sha256:" + "ab" * 32

    copy = mutate(inputs.long_context, lambda doc: doc["services"][R2].update(image=image))
    result = contract(inputs, copy)
    assert result.returncode == 1
    directory = inputs.releases[0].parent
    assert f"{copy}: services.{R2}.image: split gate: {QSPLIT}=1 requires an image whose release " \
           f"carries the dsa-indexer-qsplit patch, but '{image}' matches no release record " \
           f"({directory})" in result.errors()


# --- whole-file derivation --------------------------------------------------------------------

DERIVED = ("outside the engines and the long-tier overlay (first difference; normalized: "
           "engines, x-* anchors and engine scrape jobs removed, engine names as ENGINE-r<i>, "
           "deployment label as DEPLOYMENT); change the source file or the generator, not this "
           "file")


def test_derived_file_drifts_outside_engines(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"]["model-proxy-registrar"]["healthcheck"]["interval"] = "31s"

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy, source=inputs.source)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.model-proxy-registrar.healthcheck.interval: differs from "
        f"{inputs.source} {DERIVED}"]


def test_derived_nginx_drift_in_the_shared_part(inputs: Inputs, mutate) -> None:
    """The public TLS listener is shared with the source: a change there is reported."""
    def drift(doc: dict[str, Any]) -> None:
        [source] = [c["source"] for c in doc["services"]["nginx"]["configs"]]
        content = doc["configs"][source]["content"]
        assert content.count("keepalive_timeout 1h;") == 1
        doc["configs"][source]["content"] = content.replace("keepalive_timeout 1h;",
                                                            "keepalive_timeout 2h;")

    copy = mutate(inputs.long_context, drift)
    result = contract(inputs, copy, source=inputs.source)
    assert result.returncode == 1
    [error] = result.errors()
    assert error.startswith(f"{copy}: configs.nginx_conf.content[")
    assert error.endswith(f": differs from {inputs.source} {DERIVED}")


def test_engine_only_changes_are_not_derivation_drift(inputs: Inputs, mutate) -> None:
    copy = mutate(inputs.long_context,
                  lambda doc: set_flag(doc, R1, "--chunked-prefill-size", "4096"))
    result = contract(inputs, copy, source=inputs.source)
    assert "outside the engines" not in result.output


def test_source_itself_is_not_the_long_context_file(inputs: Inputs) -> None:
    """The overlay is only allowed one way: the source compared with itself as derived fails
    only if it lacked the overlay, so comparing the long-context file to itself must fail."""
    result = contract(inputs, inputs.long_context, source=inputs.long_context)
    assert result.returncode == 1
    assert any(DERIVED in e for e in result.errors())
