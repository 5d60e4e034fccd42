"""Start order: what must have happened before a service starts (`depends_on`), per class.

  start-order   a class's `waits_for` (deploy/validators/service_classes.py) names other classes and a
                condition: every service of such a class in the file is in the service's
                depends_on with exactly that condition and `required: true` (engines wait for
                the model download to complete; the registrar waits for every engine to be
                healthy, so it never announces a host whose replicas still load); a depends_on
                entry on a service of a class not named there is a finding too
"""

from __future__ import annotations

from typing import Any, Mapping

from deploy.validators.compose_doc import Finding, join_path
from deploy.validators.model import Model
from deploy.validators.service_keys import class_of
from deploy.validators.tier import Tier

WHY = {
    "service_completed_successfully": "a replica started earlier loads a partial checkpoint",
    "service_healthy": "registering earlier announces a host whose replicas still load (~50 min)",
    "service_started": "it forwards to that service",
}


def start_order_findings(model: Model, tier: Tier) -> list[Finding]:
    classes = {name: class_of(model, tier, name) for name in model.services}
    findings = []
    for name, service in sorted(model.services.items()):
        cls = classes[name]
        if cls is None:
            continue
        base = join_path("services", name, "depends_on")
        deps: Mapping[str, Any] = service.get("depends_on") or {}
        for other, other_cls in sorted(classes.items()):
            want = cls.waits_for.get(other_cls.name) if other_cls is not None else None
            if want is None or other == name:
                continue
            entry = deps.get(other)
            if not isinstance(entry, Mapping):
                findings.append(model.finding(join_path(base, other), (
                    f"start-order: the {cls.name} class waits for {other} ({other_cls.name}) "
                    f"to be {want} ({WHY[want]}); add `depends_on: {other}: condition: {want}`")))
                continue
            if entry.get("condition") != want:
                findings.append(model.finding(join_path(base, other, "condition"), (
                    f"start-order: is {entry.get('condition')}, the {cls.name} class waits for "
                    f"{other} to be {want} ({WHY[want]})")))
            if entry.get("required") is False:
                findings.append(model.finding(join_path(base, other, "required"), (
                    f"start-order: required: false starts the {cls.name} without {other}; "
                    "remove it")))
        for other in sorted(deps):
            other_cls = classes.get(other)
            if other_cls is None or other_cls.name not in cls.waits_for:
                findings.append(model.finding(join_path(base, other), (
                    f"start-order: the {cls.name} class waits for no "
                    f"{other_cls.name if other_cls else 'unknown'} service; remove the "
                    "dependency, or state it in deploy/validators/service_classes.py (waits_for)")))
    return findings


RULES = (start_order_findings,)
