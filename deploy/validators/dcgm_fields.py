"""The GPU monitor's field list: the signals that say a GPU is failing are exported.

  dcgm-fields   every service of a class that monitors every GPU (DCGM) reads its field list
                (`-f`/`--collectors`) from a config embedded in the file, and that list has
                every field of DCGM_REQUIRED_FIELDS (deploy/validators/service_classes.py: Xid,
                volatile and aggregate ECC, row remapping) on a line that is not a comment
"""

from __future__ import annotations

from deploy.validators.compose_doc import Finding, command_argv, config_contents, join_path
from deploy.validators.model import Model
from deploy.validators.service_classes import DCGM_REQUIRED_FIELDS
from deploy.validators.tier import Tier

FLAGS = ("-f", "--collectors")


def _field_list(argv: list[str]) -> str | None:
    for i, token in enumerate(argv):
        if token in FLAGS and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith("--collectors="):
            return token.split("=", 1)[1]
    return None


def exported_fields(text: str) -> set[str]:
    fields = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            fields.add(line.split(",", 1)[0].strip())
    return fields


def dcgm_findings(model: Model, tier: Tier) -> list[Finding]:
    contents = config_contents(model.as_compose_file())
    findings = []
    for name, service in sorted(model.services.items()):
        row = tier.sidecar_class(name)
        if row is None or not row.monitors_all_gpus:
            continue
        path = _field_list(command_argv(service.get("command")))
        mounted = {str(c.get("target")): str(c.get("source")) for c in service.get("configs") or []
                   if isinstance(c, dict)}
        source = mounted.get(path or "")
        if source not in contents:
            findings.append(model.finding(join_path("services", name, "command"), (
                f"dcgm-fields: the field list ({path or 'the image default'}) is no config "
                "embedded in this file, so what it exports cannot be checked; mount an embedded "
                "list and pass it with -f")))
            continue
        missing = [f for f in DCGM_REQUIRED_FIELDS if f not in exported_fields(contents[source])]
        if missing:
            findings.append(model.finding(join_path("configs", source, "content"), (
                f"dcgm-fields: the field list {name} exports lacks {', '.join(missing)}; without "
                "them a GPU with Xid or ECC errors looks healthy (add the lines back)")))
    return findings


RULES = (dcgm_findings,)
