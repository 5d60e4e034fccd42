"""Plans a rollout between two revisions of a compose file from what Compose itself compares.

A service must be replaced when Compose's recreate hash (`config --hash`, the value Compose
stores in the container's `com.docker.compose.config-hash` label) differs between the
revisions, or when the content of a config it mounts differs: Compose does not recreate a
container for a config's content (an inline `configs.content` edit included), so such a
service needs a forced recreate, e.g. the collector whose scrape labels changed, which would
otherwise keep exporting the old ones. The plan is refused unless it touches exactly the
services the rollout names, creates nothing unnamed and removes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deploy.rollout.compose_cli import ServiceState

RECREATE, FORCE_RECREATE, CREATE, REMOVE = "recreate", "force-recreate", "create", "remove"


@dataclass(frozen=True)
class Change:
    service: str
    kind: str  # RECREATE | FORCE_RECREATE | CREATE | REMOVE
    reasons: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.service} ({'; '.join(self.reasons)})" if self.reasons else self.service


@dataclass
class Plan:
    changes: dict[str, Change] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)

    @property
    def touched(self) -> set[str]:
        return {name for name, change in self.changes.items() if change.kind != REMOVE}

    def of_kind(self, kind: str) -> list[Change]:
        return [c for c in self.changes.values() if c.kind == kind]


def _config_reasons(deployed: ServiceState, target: ServiceState) -> list[str]:
    reasons = []
    for name in sorted(set(deployed.configs) | set(target.configs)):
        before, after = deployed.configs.get(name), target.configs.get(name)
        if before is None:
            reasons.append(f"mounts config {name} (new)")
        elif after is None:
            reasons.append(f"no longer mounts config {name}")
        elif before != after:
            reasons.append(f"config {name} content changed ({before[:12]} -> {after[:12]})")
    return reasons


def make_plan(deployed: dict[str, ServiceState], target: dict[str, ServiceState]) -> Plan:
    plan = Plan()
    for name in sorted(set(deployed) | set(target)):
        if name not in deployed:
            plan.changes[name] = Change(name, CREATE, ("new service",))
            continue
        if name not in target:
            plan.changes[name] = Change(name, REMOVE, ("not in the target revision",))
            continue
        before, after = deployed[name], target[name]
        configs = _config_reasons(before, after)
        if before.compose_hash != after.compose_hash:
            reason = f"Compose recreate hash {before.compose_hash[:12]} -> {after.compose_hash[:12]}"
            plan.changes[name] = Change(name, RECREATE, (reason, *configs))
        elif configs:
            # Compose would keep this container (same hash) and with it the old file.
            plan.changes[name] = Change(name, FORCE_RECREATE, (*configs, "Compose keeps the container: forced recreate"))
        else:
            plan.unchanged.append(name)
    return plan


def refusals(plan: Plan, services: list[str]) -> list[str]:
    reasons = []
    named = set(services)
    removed = plan.of_kind(REMOVE)
    if removed:
        reasons.append("the target revision would remove (orphan) " + ", ".join(c.service for c in removed)
                       + "; nothing may be removed by a rollout")
    unknown = sorted(s for s in named if s not in plan.changes and s not in plan.unchanged)
    if unknown:
        reasons.append(f"named services that neither revision defines (or only under an inactive profile): {', '.join(unknown)}")
    extra = [plan.changes[s] for s in sorted(plan.touched - named)]
    if extra:
        reasons.append("the target revision also changes services not named with --services: "
                       + "; ".join(c.describe() for c in extra) + " (name them to roll them too)")
    untouched = sorted(named & set(plan.unchanged))
    if untouched:
        reasons.append(f"named services the target revision does not change: {', '.join(untouched)}")
    return reasons


def render(plan: Plan) -> list[str]:
    lines = []
    for change in plan.changes.values():
        lines.append(f"  {change.kind:<15} {change.service}: {'; '.join(change.reasons)}")
    if plan.unchanged:
        lines.append(f"  {'unchanged':<15} {', '.join(plan.unchanged)}")
    return lines
