"""Request-path drifts a generator change makes, each applied to every committed file.

Each edit is what regenerating after a change of the generator (or of its shared table) writes
into every file, so the production contract's whole-file rule cannot see it; the request-path
rules (deploy/validators/request_path.py, run by the runtime validator) must, naming the rule and the
dotted path in every file. Measured before these rules: 2 of these 12 drifts failed every file.
"""

from __future__ import annotations

import re
from pathlib import Path

from pins import table as pin_table
from deploy.validators.tests.harness import (CheckInputs, assert_generator_edit_caught, engine_names,
                                             generator_edit, load, replace_once)

SENTINEL = pin_table.load().unresolved
TIER = "the glm53-h200 tier's"


def in_service(text: str, service: str, old: str, new: str) -> str:
    """Replace `old` (exactly once) inside one service's block of a generated file."""
    start = text.index(f"\n  {service}:\n")
    end = start + 3 + re.search(r"\n  [a-z0-9-]+:\n", text[start + 3:]).start()
    return text[:start] + replace_once(text[start:end], old, new) + text[end:]


def nginx_lines(path: Path, needle: str) -> list[int]:
    content = load(path)["configs"]["nginx_conf"]["content"]
    return [i for i, line in enumerate(content.splitlines(), start=1) if needle in line]


def all_files(ci: CheckInputs, tmp_path: Path, edit) -> list[Path]:
    return generator_edit(ci, tmp_path, lambda text, _path: edit(text))


def test_nginx_proxies_to_the_wrong_proxy_port(check_inputs, tmp_path) -> None:
    old, new = "proxy_pass http://$$inference_proxy:8000", "proxy_pass http://$$inference_proxy:8001"
    files = all_files(check_inputs, tmp_path, lambda t: t.replace(old, new))

    def expected(path: Path) -> list[str]:
        return [f"{path}: configs.nginx_conf.content: upstream-port: line {n} ({where}) proxies "
                "to proxy-glm53:8001, but proxy-glm53 listens on 8000"
                for n, where in zip(nginx_lines(path, "$$inference_proxy:8001"),
                                    ["location /", "location /", "location = /_proxy_models"])]

    assert_generator_edit_caught(check_inputs, files, expected)


def test_proxy_backends_on_the_wrong_engine_port(check_inputs, tmp_path) -> None:
    def edit(text: str) -> str:
        return re.sub(r"VLLM_BACKEND_URLS: \$\{GLM53_BACKEND_URLS:-[^}]*",
                      lambda m: m.group(0).replace(":8000", ":30000"), text)

    files = all_files(check_inputs, tmp_path, edit)
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.proxy-glm53.environment.VLLM_BACKEND_URLS: upstream-port: backend "
        f"http://{e}:30000 uses port 30000, but {e} listens on 8000 (its --port)"
        for e in engine_names(p)], contract_sees=True)


def test_proxy_backends_drop_a_replica(check_inputs, tmp_path) -> None:
    def edit(text: str) -> str:
        return re.sub(r"(VLLM_BACKEND_URLS: \$\{GLM53_BACKEND_URLS:-[^,}]*),[^}]*", r"\1", text)

    files = all_files(check_inputs, tmp_path, edit)
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.{engine_names(p)[1]}: upstream-port: engine is in no inference proxy's "
        "VLLM_BACKEND_URLS; it would never get traffic"], contract_sees=True)


def test_collector_loses_its_storage_volume(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "otelcol-contrib", "      - otelcol_app_storage:/var/lib/otelcol/storage\n", ""))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.otelcol-contrib: mounted-files: reads /var/lib/otelcol/storage "
        "(configs.otelcol_app_config.content extensions.file_storage.directory), but no volume, "
        "bind, config, secret or tmpfs is mounted there (mounted: /var/lib/docker/containers, "
        "/etc/otelcol-contrib/config.yaml); the container would not find it"])


def test_nginx_loses_its_certificate_volume(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "nginx", "    volumes:\n      - certs:/etc/nginx/certs:ro\n", ""))

    def expected(path: Path) -> list[str]:
        return [f"{path}: services.nginx: mounted-files: reads /etc/nginx/certs/{name} "
                f"(configs.nginx_conf.content line {line} {directive}), but no volume, bind, "
                "config, secret or tmpfs is mounted there (mounted: "
                "/etc/nginx/conf.d/default.conf); the container would not find it"
                for name, directive, line in (
                    ("fullchain.pem", "ssl_certificate",
                     nginx_lines(path, "ssl_certificate /")[0]),
                    ("privkey.pem", "ssl_certificate_key",
                     nginx_lines(path, "ssl_certificate_key /")[0]))]

    assert_generator_edit_caught(check_inputs, files, expected)


def test_registrar_script_not_mounted(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "model-proxy-registrar",
        "    configs:\n      - source: registrar_script\n        target: /register.sh\n", ""))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.model-proxy-registrar: mounted-files: reads /register.sh "
        "(services.model-proxy-registrar.command[1]), but no volume, bind, config, secret or "
        "tmpfs is mounted there (mounted: none); the container would not find it"])


def _published(path: Path) -> str:
    return "8000, 8001, 8444" if path.name.endswith("LongContext.yaml") else "8000, 8444"


def test_registrar_announces_a_tls_port_nginx_does_not_publish(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: replace_once(
        t, "TLS_PORT: ${TLS_PORT:-8444}", "TLS_PORT: ${TLS_PORT:-8443}"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.model-proxy-registrar.environment.TLS_PORT: registrar-ports: "
        "TLS_PORT=8443 is announced to the model-proxy peers, but no default-started nginx "
        f"publishes host port 8443 (published: {_published(p)}); the host would get no traffic"])


def test_registrar_announces_the_plain_port_as_tls(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: replace_once(
        t, "TLS_PORT: ${TLS_PORT:-8444}", "TLS_PORT: ${TLS_PORT:-8000}"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.model-proxy-registrar.environment.TLS_PORT: registrar-ports: "
        "TLS_PORT=8000 must reach a TLS listener, but nginx:8000 is plain HTTP"])


def test_proxy_loses_its_restart_policy(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "proxy-glm53", "    restart: unless-stopped\n", ""))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.proxy-glm53.restart: sidecar-class: is 'no', {TIER} inference-proxy "
        "row requires 'unless-stopped'"])


def test_registrar_loses_its_healthcheck(check_inputs, tmp_path) -> None:
    def edit(text: str) -> str:
        return in_service(text, "model-proxy-registrar", text[
            text.index("    healthcheck:\n", text.index("\n  model-proxy-registrar:\n")):
            text.index("      start_period: 1200s\n") + len("      start_period: 1200s\n")], "")

    files = all_files(check_inputs, tmp_path, edit)
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.model-proxy-registrar.healthcheck: sidecar-class: is false, {TIER} "
        "registrar row requires true"])


def test_collector_gains_a_capability_and_a_writable_root(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "otelcol-contrib", "    cap_drop: [ALL]\n    read_only: true\n",
        "    cap_drop: [ALL]\n    cap_add: [DAC_OVERRIDE]\n"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.otelcol-contrib.cap_add: sidecar-class: is [DAC_OVERRIDE], {TIER} "
        "collector row requires unset",
        f"{p}: services.otelcol-contrib.read_only: sidecar-class: is false, {TIER} collector "
        "row requires true"])


def test_collector_token_required_again(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: replace_once(
        t, "OTEL_GATEWAY_TOKEN: ${MONITORING_INGEST_TOKEN:-}",
        "OTEL_GATEWAY_TOKEN: ${MONITORING_INGEST_TOKEN:?set MONITORING_INGEST_TOKEN}"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.otelcol-contrib.environment.OTEL_GATEWAY_TOKEN: sidecar-class: "
        "OTEL_GATEWAY_TOKEN must be optional (`${VAR:-}`), the collector row says so: a host "
        "without it could not start the file (found "
        "'${MONITORING_INGEST_TOKEN:?set MONITORING_INGEST_TOKEN}')"])


def test_perception_check_gains_privileged(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "glm53-perception-check", "    read_only: true\n", "    read_only: true\n"
        "    privileged: true\n"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.glm53-perception-check.privileged: sidecar-class: is true, {TIER} "
        "perception-check row requires false"])


def test_downloader_fetches_revision_main(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: t.replace(
        f" --revision '{SENTINEL}'", " --revision 'main'"))

    def expected(path: Path) -> list[str]:
        doc = load(path)
        script = doc["services"]["model-downloader"]["command"][0]
        downloads = [(i, line.split()[5:-2]) for i, line in
                     enumerate(script.splitlines(), start=1) if " hf download " in line]
        model = doc["services"][engine_names(path)[0]]["command"][3]
        lines = [f"{path}: services.{e}.command[5]: model-revision: loads {model} at "
                 f"'{SENTINEL}', which the downloader does not fetch (the engine would start "
                 "without its weights)" for e in engine_names(path)]
        for number, (repo, *file) in downloads:
            pin = pin_table.load().by_hub_repository(repo, file[0] if file else None)
            lines.append(f"{path}: services.model-downloader.command[0]: model-revision: line "
                         f"{number}: {' '.join([repo, *file])} revision 'main', the pin "
                         f"{pin.name} is '{SENTINEL}' (a moved branch loads other weights, or "
                         "none)")
        return lines

    assert_generator_edit_caught(check_inputs, files, expected)


def test_engines_load_revision_main(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: t.replace(
        f"      - --revision\n      - {SENTINEL}\n", "      - --revision\n      - main\n"))

    def expected(path: Path) -> list[str]:
        names = engine_names(path)
        model = load(path)["services"][names[0]]["command"][3]
        pin = pin_table.load().by_hub_repository(model)
        return ([f"{path}: services.{e}.command[5]: model-revision: loads {model} at 'main', "
                 "which the downloader does not fetch (the engine would start without its "
                 "weights)" for e in names]
                + [f"{path}: services.{e}.command[5]: model-revision: {model} revision 'main', "
                   f"the pin {pin.name} is '{SENTINEL}' (a moved branch loads other weights, or "
                   "none)" for e in names])

    assert_generator_edit_caught(check_inputs, files, expected, contract_sees=True)


def test_dcgm_loses_its_digest(check_inputs, tmp_path) -> None:
    tag = "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"
    files = all_files(check_inputs, tmp_path, lambda t: replace_once(
        t, f"nvcr.io/nvidia/k8s/dcgm-exporter@{SENTINEL}", tag))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.dcgm-glm53.image: sidecar-class: image is {tag}, the gpu-metrics row's "
        f"pin dcgm_exporter is nvcr.io/nvidia/k8s/dcgm-exporter@{SENTINEL} (a moved tag or a "
        "lost digest changes what runs)"])


def test_dcgm_covers_half_the_gpus(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: in_service(
        t, "dcgm-glm53", 'device_ids: ["0", "1", "2", "3", "4", "5", "6", "7"]',
        'device_ids: ["0", "1", "2", "3"]'))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.dcgm-glm53.deploy.resources.reservations.devices: gpu-monitor: does not "
        f"reserve GPU 4, 5, 6, 7, which {engine_names(p)[1]} use; their GPU metrics would be "
        "missing"])


def test_sidecar_without_a_tier_row(check_inputs, tmp_path) -> None:
    files = all_files(check_inputs, tmp_path, lambda t: t.replace(
        "\n  dcgm-glm53:\n", "\n  dcgm-glm53-x:\n"))
    assert_generator_edit_caught(check_inputs, files, lambda p: [
        f"{p}: services.dcgm-glm53-x: sidecar-class: no row of the glm53-h200 tier table "
        "(deploy/validators/tier.py) names this service; state its restart policy, healthcheck, "
        "memory, user and capabilities there"], contract_sees=True)
