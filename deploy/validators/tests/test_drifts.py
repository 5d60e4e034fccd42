"""Issue 39's hidden drifts, each applied to every committed file it touches, through `check`.

Each drift is a plausible generator or operator change that breaks production. It is applied the
way a generator change lands: to every generated file, each under its own name (so the
long-context file is compared with an equally drifted source and the whole-file rule cannot see
it). Every test asserts the runtime validator's exact findings, rule name and dotted path, for
every file, and (unless the contract states the value itself) that the production contract is
silent. Measured before these rules: 2 of the issue's 20 drifts caught.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from deploy.validators.cli import tool_path
from deploy.validators.model import load_model
from deploy.validators.service_classes import CLASSES, LOGGING, NGINX_LOG_PRIVACY
from deploy.validators.service_keys import service_key_findings
from deploy.validators.tests.harness import (CheckInputs, assert_generator_edit_caught, engine_names,
                                             generator_mutation, load, run_check)
from deploy.validators.tier import GLM53_H200, SidecarClass

ENGINE = CLASSES["engine"].keys
SHM_WHY = ("ipc: host gives the engine the host's /dev/shm; a 64-image request writes ~8.8 GiB "
           "of shared-memory segments there, so a fixed-size /dev/shm fails it")
REGISTRAR = "model-proxy-registrar"
COLLECTOR = "otelcol-contrib"


def on_engines(ci: CheckInputs, tmp_path: Path,
               edit: Callable[[dict[str, Any]], None]) -> list[Path]:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        for name, service in doc["services"].items():
            if name.startswith("model-sg-"):
                edit(service)

    return generator_mutation(ci, tmp_path, mutation)


def per_engine(message: Callable[[Path, str], str]) -> Callable[[Path], list[str]]:
    return lambda path: [message(path, e) for e in engine_names(path)]


def absent(key: str) -> Callable[[Path, str], str]:
    why = ENGINE[key].why
    return lambda p, e: (f"{p}: services.{e}.{key}: service-keys: must be absent on the engine "
                         f"class ({why}); remove `{key}`")


# --- /dev/shm ----------------------------------------------------------------------------------

def test_dev_shm_as_a_small_tmpfs(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path,
                       lambda s: s.__setitem__("tmpfs", ["/dev/shm:size=1g"]))
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.tmpfs[0]: engine-shm: a tmpfs replaces /dev/shm; {SHM_WHY} "
        "(remove it)")))


def test_dev_shm_as_a_tmpfs_volume(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s["volumes"].append(
        {"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": "1g"}}))
    # A tmpfs has no source (engine-runtime compares sorted source:target pairs).
    volumes = ("[None:/dev/shm, huggingface_cache:/root/.cache/huggingface, "
               "kernel_cache:/root/.cache/kernels]")
    want = ("[huggingface_cache:/root/.cache/huggingface, kernel_cache:/root/.cache/kernels]")

    def expected(p: Path) -> list[str]:
        names = engine_names(p)
        return [f"{p}: services.{e}.volumes: engine-runtime: is {volumes}, the glm53-h200 tier "
                f"table requires {want}" for e in names] + [
            f"{p}: services.{e}.volumes[2]: engine-shm: a tmpfs mount of 1073741824 bytes "
            f"replaces /dev/shm; {SHM_WHY} (remove it)" for e in names]

    assert_generator_edit_caught(check_inputs, files, expected)


def test_small_shm_size(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.__setitem__("shm_size", "1g"))
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.shm_size: engine-shm: shm_size 1073741824 bytes sizes /dev/shm; "
        f"{SHM_WHY} (remove shm_size and keep ipc: host)")))


# --- host namespaces, privilege, limits, signals -----------------------------------------------

def test_engine_network_mode_host(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.__setitem__("network_mode", "host"))
    assert_generator_edit_caught(check_inputs, files, per_engine(absent("network_mode")))


def test_engine_privileged(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.__setitem__("privileged", True))
    assert_generator_edit_caught(check_inputs, files, per_engine(absent("privileged")))


def test_engine_pid_host(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.__setitem__("pid", "host"))
    assert_generator_edit_caught(check_inputs, files, per_engine(absent("pid")))


def test_engine_mem_limit(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.__setitem__("mem_limit", "64g"))
    assert_generator_edit_caught(check_inputs, files, per_engine(absent("mem_limit")))


def test_engine_memory_limit_under_deploy(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s["deploy"]["resources"].__setitem__(
        "limits", {"memory": "64g"}))
    why = ENGINE["deploy"].children["resources"].children["limits"].why
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.deploy.resources.limits: service-keys: must be absent on the engine "
        f"class ({why}); remove `limits`")))


def test_stop_signal_sigkill(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.__setitem__("stop_signal", "SIGKILL"))
    why = ENGINE["stop_signal"].why
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.stop_signal: service-keys: is \"SIGKILL\", the engine class allows "
        f"\"SIGTERM\" ({why})")))


def test_unknown_key_on_an_engine(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path,
                       lambda s: s.__setitem__("sysctls", {"kernel.shmmax": "1073741824"}))
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.sysctls: service-keys: `sysctls` is not in the engine class's allow "
        "table; remove it, or state in deploy/validators/service_classes.py what it may be there and "
        "why")))


# --- healthchecks by meaning -------------------------------------------------------------------

@pytest.mark.parametrize("suffix, forced", [(" || true", "|| true"), ("; exit 0", "; exit 0")])
def test_healthcheck_that_cannot_fail(check_inputs, tmp_path, suffix: str, forced: str) -> None:
    def edit(service: dict[str, Any]) -> None:
        program = service["healthcheck"]["test"][-1]
        service["healthcheck"]["test"] = ["CMD-SHELL", f'python3 -c "{program}"{suffix}']

    files = on_engines(check_inputs, tmp_path, edit)
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.healthcheck.test: healthcheck-can-fail: the test forces success "
        f"('{forced}'), so the service is healthy whatever happens; let the probe's failure be "
        "the test's exit status")))


def test_start_period_shorter_than_the_cold_start(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path,
                       lambda s: s["healthcheck"].__setitem__("start_period", "60s"))
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.healthcheck.start_period: engine-healthcheck: start_period 1m0s is "
        "shorter than the documented cold start (50 min); a loading replica would be called "
        "unhealthy (and restarted by a health-driven manager)")))


def test_healthcheck_timings_against_the_proxy_probe(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s["healthcheck"].update(
        interval="30s", retries=5))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        line for e in engine_names(p) for line in (
            f"{p}: services.{e}.healthcheck.retries: engine-healthcheck: retries 5, the "
            "inference proxy drops a replica after 3 missed 3s probes; use 3 so Docker and the "
            "proxy agree on a dead replica",
            f"{p}: services.{e}.healthcheck.interval: engine-healthcheck: interval 30s x retries "
            "5 = 150s before Docker calls a dead engine unhealthy, over the tier's 30s (the "
            "proxy has dropped it long before)")])


def test_healthcheck_disabled_by_none(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path,
                       lambda s: s["healthcheck"].__setitem__("test", ["NONE"]))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.{e}.healthcheck.test: engine-healthcheck: the test does not request "
        "http://127.0.0.1:8000/health" for e in engine_names(p)] + [
        f"{p}: services.{e}.healthcheck.test: healthcheck-can-fail: the test is NONE "
        "(disabled), so the service is healthy whatever happens; let the probe's failure be "
        "the test's exit status" for e in engine_names(p)])


# --- start order -------------------------------------------------------------------------------

def test_engines_do_not_wait_for_the_download(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s.pop("depends_on"))
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.depends_on.model-downloader: start-order: the engine class waits "
        "for model-downloader (downloader) to be service_completed_successfully (a replica "
        "started earlier loads a partial checkpoint); add `depends_on: model-downloader: "
        "condition: service_completed_successfully`")))


def test_engines_wait_only_for_the_download_to_start(check_inputs, tmp_path) -> None:
    files = on_engines(check_inputs, tmp_path, lambda s: s["depends_on"]["model-downloader"]
                       .__setitem__("condition", "service_started"))
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.depends_on.model-downloader.condition: start-order: is "
        "service_started, the engine class waits for model-downloader to be "
        "service_completed_successfully (a replica started earlier loads a partial "
        "checkpoint)")))


def test_registrar_registers_before_the_engines_are_healthy(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        doc["services"][REGISTRAR]["depends_on"] = {"nginx": {"condition": "service_started"}}

    files = generator_mutation(check_inputs, tmp_path, mutation)
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{REGISTRAR}.depends_on.{e}: start-order: the registrar class waits for "
        f"{e} (engine) to be service_healthy (registering earlier announces a host whose "
        f"replicas still load (~50 min)); add `depends_on: {e}: condition: service_healthy`")))


def test_registrar_waits_only_for_the_engines_to_start(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        for dep in doc["services"][REGISTRAR]["depends_on"].values():
            dep["condition"] = "service_started"

    files = generator_mutation(check_inputs, tmp_path, mutation)
    assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{REGISTRAR}.depends_on.{e}.condition: start-order: is service_started, "
        f"the registrar class waits for {e} to be service_healthy (registering earlier "
        "announces a host whose replicas still load (~50 min))")))


# --- logs --------------------------------------------------------------------------------------

def test_unrotated_logs(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        for service in doc["services"].values():
            options = service["logging"]["options"]
            del options["max-size"], options["max-file"]

    files = generator_mutation(check_inputs, tmp_path, mutation)
    why = LOGGING.children["options"].children["max-size"].why

    def expected(p: Path) -> list[str]:
        out = []
        for name in sorted(load(p)["services"]):
            cls = "engine" if name in engine_names(p) else None
            cls = cls or {"model-downloader": "downloader", "hf-cleanup": "maintenance",
                          "nginx": "ingress", REGISTRAR: "registrar",
                          "proxy-glm53": "inference-proxy",
                          "glm53-perception-check": "perception-check",
                          "glm53-soak-relay": "soak-relay", "dcgm-glm53": "gpu-metrics",
                          COLLECTOR: "collector"}[name]
            out += [f"{p}: services.{name}.logging.options.{key}: log-rotation: required on the "
                    f"{cls} class and missing ({why}); set `{key}`"
                    for key in ("max-size", "max-file")]
        return out

    assert_generator_edit_caught(check_inputs, files, expected)


def nginx_mutation(directives: str) -> Callable[[dict[str, Any], Path], None]:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        config = doc["configs"]["nginx_conf"]
        config["content"] = directives + config["content"]

    return mutation


@pytest.mark.parametrize("variable", ["$$http_authorization", "$$request_body"])
def test_nginx_logs_credentials_or_bodies(check_inputs, tmp_path, variable) -> None:
    files = generator_mutation(check_inputs, tmp_path, nginx_mutation(
        f"log_format full '$$remote_addr \"$$request\" {variable}';\n"
        "access_log /var/log/nginx/access.log full;\n"))
    shown = variable.replace("$$", "$")
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: configs.nginx_conf.content: nginx-log-privacy: line 1 log_format full logs "
        f"{shown} ({NGINX_LOG_PRIVACY.why}); drop them from the format"])


def test_engines_log_full_requests(check_inputs, tmp_path) -> None:
    def edit(service: dict[str, Any]) -> None:
        argv = service["command"]
        argv[argv.index("--log-requests-level") + 1] = "3"

    files = on_engines(check_inputs, tmp_path, edit)

    def expected(p: Path) -> list[str]:
        return [f"{p}: services.{e}.command[{load(p)['services'][e]['command'].index('--log-requests-level')}]: "
                "engine-log-privacy: request logging at level 3 writes prompts, images and "
                f"outputs into the engine's log ({NGINX_LOG_PRIVACY.why}); use "
                "--log-requests-level 0 (metadata only)" for e in engine_names(p)]

    result = assert_generator_edit_caught(check_inputs, files, expected, contract_sees=True)
    assert result.by_validator()["glm53-prod-contract"] == [
        f"{p}: services.{e}.command: drifted token: `--log-requests-level 3`, contract requires "
        "`--log-requests-level 0`" for p in files for e in engine_names(p)]


# --- the collector's exposure ------------------------------------------------------------------

def test_collector_mounts_the_docker_socket(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        doc["services"][COLLECTOR]["volumes"].append("/var/run/docker.sock:/var/run/docker.sock")

    files = generator_mutation(check_inputs, tmp_path, mutation)
    allowed = ("bind /var/lib/docker/containers:/var/lib/docker/containers:ro, "
               "volume otelcol_app_storage:/var/lib/otelcol/storage")
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.{COLLECTOR}.volumes[2]: collector-exposure: mounts bind "
        "/var/run/docker.sock:/var/run/docker.sock, which the collector class does not allow "
        "(the Docker socket is root on the host: whoever can reach it can start a privileged "
        f"container); allowed: {allowed}; remove it, or state it with its reason in "
        "deploy/validators/service_classes.py"])


def test_collector_publishes_its_otlp_port(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        doc["services"][COLLECTOR]["ports"] = ["4317:4317"]

    files = generator_mutation(check_inputs, tmp_path, mutation)
    why = CLASSES["collector"].keys["ports"].why
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.{COLLECTOR}.ports: collector-exposure: must be absent on the collector "
        f"class ({why}); remove `ports`"])


# --- secrets -----------------------------------------------------------------------------------

def test_token_with_a_literal_fallback(check_inputs, tmp_path) -> None:
    literal = "changeme-" + "x7Qp"  # built, so the file has no literal to grep

    def mutation(doc: dict[str, Any], path: Path) -> None:
        for service in doc["services"].values():
            env = service.get("environment") or {}
            for key, value in env.items():
                if isinstance(value, str) and value.startswith("${PROXY_TOKEN:?"):
                    env[key] = "${PROXY_TOKEN:-" + literal + "}"

    files = generator_mutation(check_inputs, tmp_path, mutation)
    result = run_check(check_inputs, *files)
    assert literal not in result.output, "the literal fallback appears in the output (not shown)"
    hint = "take it from the host's environment as ${VAR:?message}"
    assert result.returncode == 1
    assert result.by_validator()["runtime"] == [line for p in files for line in (
        f"{p}: services.glm53-soak-relay.environment.PROXY_TOKEN: secret-by-value: a "
        f"credential-named variable holds a literal (value not shown); {hint}",
        f"{p}: services.model-proxy-registrar.environment.PROXY_TOKEN: secret-by-value: a "
        f"credential-named variable holds a literal (value not shown); {hint}",
        f"{p}: services.proxy-glm53.environment.TOKEN: secret-by-value: a credential-named "
        f"variable holds a literal (value not shown); {hint}")]


def test_literal_fallback_of_a_credential_under_a_neutral_name(check_inputs, tmp_path) -> None:
    literal = "dev-" + "k3y"

    def mutation(doc: dict[str, Any], path: Path) -> None:
        doc["services"]["proxy-glm53"]["environment"]["UPSTREAM_AUTH_HEADER"] = (
            "Bearer ${CLOUD_API_USAGE_TOKEN:-" + literal + "}")

    files = generator_mutation(check_inputs, tmp_path, mutation)
    result = run_check(check_inputs, *files)
    assert literal not in result.output, "the literal fallback appears in the output (not shown)"
    assert result.returncode == 1
    assert result.by_validator()["runtime"] == [
        f"{p}: services.proxy-glm53.environment.UPSTREAM_AUTH_HEADER: secret-by-value: a "
        "credential-named host variable falls back to a literal (`${VAR:-literal}`, value not "
        "shown): a host without it runs with that secret; use ${VAR:?message}, or ${VAR:-} "
        "where it is optional" for p in files]


# --- GPUs --------------------------------------------------------------------------------------

def test_dcgm_drops_xid_and_ecc_fields(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        config = doc["configs"]["dcgm_h200_metrics"]
        config["content"] = "".join(line for line in config["content"].splitlines(True)
                                    if not re.search(r"XID|_ECC_", line))

    files = generator_mutation(check_inputs, tmp_path, mutation)
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: configs.dcgm_h200_metrics.content: dcgm-fields: the field list dcgm-glm53 "
        "exports lacks DCGM_FI_DEV_XID_ERRORS, DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, "
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, "
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL; without them a GPU with Xid or ECC errors looks healthy "
        "(add the lines back)"])


def test_tp8_on_four_gpus(check_inputs, tmp_path) -> None:
    def edit(service: dict[str, Any]) -> None:
        argv = service["command"]
        argv[argv.index("--tp-size") + 1] = "8"

    files = on_engines(check_inputs, tmp_path, edit)
    result = assert_generator_edit_caught(check_inputs, files, per_engine(lambda p, e: (
        f"{p}: services.{e}.command: engine-parallelism: --tp-size 8 x --pp-size 1 needs 8 "
        "GPUs, but the replica reserves 4 (deploy.resources.reservations.devices: "
        f"{', '.join(load(p)['services'][e]['deploy']['resources']['reservations']['devices'][0]['device_ids'])}"
        "); make the sizes and the reservation agree")), contract_sees=True)
    # Every file's own production contract states the argv too.
    contract = result.by_validator()["glm53-prod-contract"]
    assert contract == [
        f"{p}: services.{e}.command: drifted token: `--tp-size 8`, contract requires "
        "`--tp-size 4`" for p in files for e in engine_names(p)]


def test_tier_row_without_an_allow_table(check_inputs) -> None:
    """A sidecar row added to the tier table without a class here would go unchecked."""
    path = check_inputs.compose_files[0]
    # Under Bazel the binary is a runfiles-relative path; model.py runs it from another cwd.
    model = load_model(path, str(path), tool_path(check_inputs.compose_bin))
    tier = replace(GLM53_H200, sidecars=(
        SidecarClass("edge-cache", ("nginx",), pin="nginx", restart="unless-stopped",
                     healthcheck=False, memory="1g"), *GLM53_H200.sidecars))
    assert [f.render() for f in service_key_findings(model, tier)] == [
        f"{path}: services.nginx: service-keys: the glm53-h200 tier's edge-cache row has no "
        "allow table; state every key its services may have in deploy/validators/service_classes.py "
        "(CLASSES)"]


# --- the production contract on every file -----------------------------------------------------

def test_production_contract_binds_every_file(check_inputs, tmp_path) -> None:
    def edit(service: dict[str, Any]) -> None:
        argv = service["command"]
        argv[argv.index("--mem-fraction-static") + 1] = "0.92"

    files = on_engines(check_inputs, tmp_path, edit)
    result = run_check(check_inputs, *files)
    assert result.returncode == 1
    found = result.by_validator()
    assert "runtime" not in found, found["runtime"]
    assert found["glm53-prod-contract"] == [
        f"{p}: services.{e}.command: drifted token: `--mem-fraction-static 0.92`, contract "
        "requires `--mem-fraction-static 0.80`" for p in files for e in engine_names(p)]


def test_file_of_no_known_deployment_fails_the_contract(check_inputs, tmp_path) -> None:
    def mutation(doc: dict[str, Any], path: Path) -> None:
        for service in doc["services"].values():
            service["labels"]["nearai.otel.deployment"] = "glm53-unknown"

    [first] = generator_mutation(check_inputs, tmp_path, mutation)[:1]
    result = run_check(check_inputs, first)
    assert result.returncode == 1
    assert result.by_validator()["glm53-prod-contract"] == [
        f"{first}: no production contract binds deployment 'glm53-unknown' (the "
        "nearai.otel.deployment label); contracts: glm53-flash-sgl-tp4, "
        "glm53-flash-sgl-tp4-w4afp8, glm53-flash-sgl-tp4-w4afp8-long-context; state one in "
        "deploy/validators/glm53_contract.py"]
