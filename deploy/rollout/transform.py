"""Turns Compose's canonical model of a deployment into its CPU rehearsal on this machine.

Kept, as the revision has them: the engines (role `engine`) with their container names,
restart policy, init, stop grace period, depends_on and named volumes; the model downloader
they wait for; nginx and the inference proxy on the path a request takes. Changed:

* engines run the real SGLang HTTP server with the fake scheduler plugin on a tiny model
  (tools/sglang_server/in_container, shared with the lab) with `--enable-metrics`, on the image the caller maps their release to
  (a local CPU image, or a loopback registry's copy that the rollout must pull); no GPU
  runtime, no device reservations, no `ipc: host`; ulimits the project's podman settings
  allow; the revision's own healthcheck, unchanged;
* the downloader writes the tiny model (model_dir.py's small 8,000-token tokenizer) into the same
  `huggingface_cache` volume;
* nginx and the proxy are stand-ins (in_container/standin.py, with the drain API) on the
  project's CPU base image, routing as the revision says (nginx -> the services it depends on,
  the proxy -> its VLLM_BACKEND_URLS); only nginx's port 8000 is published, on 127.0.0.1;
* the perception check service keeps its name, profile and environment (the rollout runs it
  per replica with PERCEPTION_TARGETS) but runs in_container/perception_standin.py: the fake
  scheduler answers "ok" to everything, so the colour question cannot pass; the stand-in checks
  /health, /v1/models and one chat completion on the replica it is given;
* a private network with fixed addresses and /etc/hosts entries (podman 4.3 with CNI here has
  no DNS between containers); every command starts with in_container/announce.py, which makes
  a new container's MAC known to its peers as a Docker host does (a replaced engine keeps its
  address but not its MAC: without it the proxy's packets to it are lost for ~11 s).

Dropped (named in `Rehearsal.dropped`): services off the request path whose images or devices
cannot be had here (the GPU exporter, the collector, the registrar), and every other key
naming host resources (external networks and volumes, bind mounts, published ports).
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from tools.podman.spec import NOFILE, NPROC

INGRESS, PROXY, DOWNLOADER, CHECK = "nginx", "proxy-glm53", "model-downloader", "glm53-perception-check"
SERVER, SUPPORT = "/sglang-server", "/rehearsal"  # read-only: tools/sglang_server/in_container, deploy/rollout/in_container
MODEL_DIR = "/root/.cache/huggingface/rehearsal-model"
SERVICE_PORT = 8000
BROKEN_MODEL_DIR = "/root/.cache/huggingface/no-such-model"


class TransformError(Exception):
    pass


@dataclass
class Rehearsal:
    model: dict[str, Any]
    addresses: dict[str, str]  # service -> fixed address on the rehearsal network
    engines: list[str]
    dropped: list[str] = field(default_factory=list)


def _engine_names(services: dict[str, Any]) -> list[str]:
    return sorted(n for n, s in services.items() if (s.get("labels") or {}).get("nearai.otel.role") == "engine")


def _backends(proxy: dict[str, Any]) -> list[str]:
    urls = (proxy.get("environment") or {}).get("VLLM_BACKEND_URLS") or ""
    backends = [u.strip() for u in urls.split(",") if u.strip()]
    if not backends:
        raise TransformError(f"services.{PROXY}.environment.VLLM_BACKEND_URLS: no backend URLs to route to")
    return backends


def _announced(argv: list[str]) -> list[str]:
    return ["python3", f"{SUPPORT}/announce.py", "--", *argv]


def _base(service: dict[str, Any], image: str, address: str, hosts: list[str]) -> dict[str, Any]:
    out = {
        "image": image,
        # Images loaded into podman have no registry to come from; any other is pulled.
        "pull_policy": "never" if image.startswith("localhost/") else "missing",
        "networks": {"default": {"ipv4_address": address}},
        "extra_hosts": hosts,
        "ulimits": {"nofile": {"soft": NOFILE, "hard": NOFILE}, "nproc": {"soft": NPROC, "hard": NPROC}},
    }
    for key in ("container_name", "restart", "init", "stop_grace_period", "labels", "profiles"):
        if key in service:
            out[key] = copy.deepcopy(service[key])
    return out


def _named_volumes(service: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
    declared = model.get("volumes") or {}
    return [copy.deepcopy(v) for v in service.get("volumes") or []
            if v.get("type") == "volume" and not (declared.get(v.get("source")) or {}).get("external")]


def rehearsal_model(model: dict[str, Any], engine_images: dict[str, str], support_image: str, server_dir: str,
                    support_dir: str, subnet: str, ingress_port: int, broken: frozenset[str] = frozenset()) -> Rehearsal:
    """`engine_images` maps each engine's image reference in the revision to the one to run."""
    services = model.get("services") or {}
    engines = _engine_names(services)
    for name in (INGRESS, PROXY, DOWNLOADER, CHECK):
        if name not in services:
            raise TransformError(f"services.{name}: the rehearsal needs it and the revision has none")
    keep = [CHECK, DOWNLOADER, INGRESS, PROXY, *engines]
    network = ipaddress.ip_network(subnet)
    addresses = {name: str(network.network_address + 10 + i) for i, name in enumerate(sorted(keep))}
    hosts = [f"{services[n].get('container_name', n)}:{addresses[n]}" for n in sorted(keep)]
    hosts += [f"{n}:{addresses[n]}" for n in sorted(keep) if services[n].get("container_name", n) != n]
    mounts = [{"type": "bind", "source": server_dir, "target": SERVER, "read_only": True},
              {"type": "bind", "source": support_dir, "target": SUPPORT, "read_only": True}]
    out: dict[str, Any] = {}

    for name in engines:
        service = services[name]
        image = service.get("image")
        if image not in engine_images:
            raise TransformError(f"services.{name}.image: {image} is not one of the images built here: {sorted(engine_images)}")
        engine = _base(service, engine_images[image], addresses[name], hosts)
        argv = service.get("command") or []
        served = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv else "rehearsal"
        engine["command"] = _announced([
            "python3", "-m", "sglang.launch_server",
            "--model-path", BROKEN_MODEL_DIR if name in broken else MODEL_DIR,
            "--served-model-name", served,
            "--device", "cpu", "--skip-server-warmup", "--enable-metrics",
            "--host", "0.0.0.0", "--port", str(SERVICE_PORT),
        ])
        env = dict(service.get("environment") or {})
        env.update({
            "PYTHONPATH": SERVER,
            "SGLANG_PLUGINS": "lab_fake_scheduler",
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0",
            # sglang's CPU memory probe runs lscpu, which the images lack; a binding skips it.
            "SGLANG_CPU_OMP_THREADS_BIND": "all",
        })
        engine["environment"] = env
        engine["volumes"] = _named_volumes(service, model) + mounts
        if "healthcheck" not in service:
            raise TransformError(f"services.{name}.healthcheck: the rehearsal runs the revision's own, and it has none")
        engine["healthcheck"] = copy.deepcopy(service["healthcheck"])
        engine["depends_on"] = {d: v for d, v in (service.get("depends_on") or {}).items() if d in keep}
        out[name] = engine

    downloader = _base(services[DOWNLOADER], support_image, addresses[DOWNLOADER], hosts)
    # The 8,000-token BPE: the rehearsal tests the rollout's order and health gates, not the
    # tokenizer, and SERVER holds no copy of the GLM-class fixture (the lab stages one per run).
    downloader["command"] = _announced(["python3", f"{SERVER}/model_dir.py", "--text", MODEL_DIR, "--tokenizer", "small"])
    downloader["volumes"] = _named_volumes(services[DOWNLOADER], model) + mounts
    out[DOWNLOADER] = downloader

    proxy = _base(services[PROXY], support_image, addresses[PROXY], hosts)
    proxy["command"] = _announced(["python3", f"{SUPPORT}/standin.py", "--port", str(SERVICE_PORT),
                                   *[a for url in _backends(services[PROXY]) for a in ("--backend", url)]])
    proxy["volumes"] = mounts
    out[PROXY] = proxy

    ingress = _base(services[INGRESS], support_image, addresses[INGRESS], hosts)
    upstreams = [d for d in (services[INGRESS].get("depends_on") or {}) if d in keep]
    ingress["command"] = _announced(["python3", f"{SUPPORT}/standin.py", "--port", str(SERVICE_PORT),
                                     *[a for d in upstreams for a in ("--backend", f"http://{d}:{SERVICE_PORT}")]])
    ingress["volumes"] = mounts
    ingress["ports"] = [{"target": SERVICE_PORT, "published": str(ingress_port), "host_ip": "127.0.0.1", "protocol": "tcp"}]
    ingress["depends_on"] = {d: v for d, v in (services[INGRESS].get("depends_on") or {}).items() if d in keep}
    out[INGRESS] = ingress

    check = _base(services[CHECK], support_image, addresses[CHECK], hosts)
    check.pop("container_name", None)  # `compose run` names each one-off container itself
    check["command"] = _announced(["python3", f"{SUPPORT}/perception_standin.py"])
    check["environment"] = {k: v for k, v in (services[CHECK].get("environment") or {}).items()
                            if k in ("MODEL_NAME", "PERCEPTION_TARGETS")}
    check["volumes"] = mounts
    out[CHECK] = check

    volumes = sorted({v["source"] for s in out.values() for v in s.get("volumes", []) if v.get("type") == "volume"})
    rehearsal = {
        "services": out,
        "networks": {"default": {"ipam": {"config": [{"subnet": subnet}]}}},
        "volumes": {v: {} for v in volumes},
    }
    return Rehearsal(model=rehearsal, addresses=addresses, engines=engines,
                     dropped=sorted(set(services) - set(keep)))
