"""Every key of every service against its class's allow table (deploy/validators/service_classes.py).

  service-keys      a key no entry of the class names, a key that must be absent, a value the
                    entry does not allow, a required key missing (log-rotation for `logging`,
                    collector-exposure for the collector's ports)
  service-mounts    a `volumes` entry the class does not list (the Docker socket above all)

A service of no class is the sidecar-class rule's finding. Keys another rule judges are only
checked for being allowed at all; the named rule judges their value.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from deploy.validators import topology
from deploy.validators.compose_doc import Finding, join_path
from deploy.validators.model import Model
from deploy.validators.service_classes import ANY_KEY, CLASSES, DOCKER_SOCKET_WHY, Allow, Mount, ServiceClass
from deploy.validators.tier import Tier

TABLE = "deploy/validators/service_classes.py"


def class_of(model: Model, tier: Tier, name: str) -> ServiceClass | None:
    if name in topology.engines(model.as_compose_file()):
        return CLASSES["engine"]
    row = tier.sidecar_class(name)
    return CLASSES.get(row.name) if row is not None else None


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _mount(entry: Mapping[str, Any]) -> Mount:
    return Mount(str(entry.get("type")), str(entry.get("source")), str(entry.get("target")),
                 bool(entry.get("read_only")))


def _mount_findings(model: Model, where: str, cls: ServiceClass, allow: Allow,
                    value: Any) -> list[Finding]:
    findings = []
    allowed = set(allow.mounts or ())
    for i, entry in enumerate(value or []):
        mount = _mount(entry if isinstance(entry, Mapping) else {})
        if mount in allowed:
            continue
        reason = DOCKER_SOCKET_WHY if "docker.sock" in mount.source else allow.why
        rule = "collector-exposure" if cls.name == "collector" else allow.rule
        findings.append(model.finding(join_path(where, i), (
            f"{rule}: mounts {mount.render()}, which the {cls.name} class does not allow "
            f"({reason}); allowed: {', '.join(m.render() for m in allow.mounts or ()) or 'none'}; "
            f"remove it, or state it with its reason in {TABLE}")))
    return findings


def _walk(model: Model, where: str, cls: ServiceClass, keys: Mapping[str, Allow],
          value: Mapping[str, Any]) -> list[Finding]:
    findings = []
    for key, sub in value.items():
        path = join_path(where, str(key))
        allow = keys.get(str(key)) or keys.get(ANY_KEY)
        if allow is None:
            findings.append(model.finding(path, (
                f"service-keys: `{key}` is not in the {cls.name} class's allow table; remove it, "
                f"or state in {TABLE} what it may be there and why")))
        elif allow.absent:
            findings.append(model.finding(path, (
                f"{allow.rule}: must be absent on the {cls.name} class ({allow.why}); "
                f"remove `{key}`")))
        elif allow.values is not None and sub not in allow.values:
            findings.append(model.finding(path, (
                f"{allow.rule}: is {_show(sub)}, the {cls.name} class allows "
                f"{' or '.join(_show(v) for v in allow.values)} ({allow.why})")))
        elif allow.mounts is not None:
            findings += _mount_findings(model, path, cls, allow, sub)
        elif allow.children is not None:
            if isinstance(sub, Mapping):
                findings += _walk(model, path, cls, allow.children, sub)
            else:
                findings.append(model.finding(path, (
                    f"{allow.rule}: is {_show(sub)}, the {cls.name} class expects a mapping "
                    f"({allow.why})")))
    for key, allow in keys.items():
        if allow.required and key != ANY_KEY and key not in value:
            findings.append(model.finding(join_path(where, key), (
                f"{allow.rule}: required on the {cls.name} class and missing ({allow.why}); "
                f"set `{key}`")))
    return findings


def service_key_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    for name, service in sorted(model.services.items()):
        cls = class_of(model, tier, name)
        row = tier.sidecar_class(name)
        if cls is None and row is not None:
            # A tier row without an allow table would leave its services' keys unchecked.
            findings.append(model.finding(join_path("services", name), (
                f"service-keys: the {tier.name} tier's {row.name} row has no allow table; "
                f"state every key its services may have in {TABLE} (CLASSES)")))
        if cls is None or not isinstance(service, Mapping):
            continue  # sidecar-class reports a service of no class
        findings += _walk(model, join_path("services", name), cls, cls.keys, service)
    return findings


RULES = (service_key_findings,)
