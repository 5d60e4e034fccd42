"""The mixed-traffic phase's plan: which request is sent when, the same plan on every arm.

Open loop: every request has a fixed offset from the phase start, so each arm gets the same
requests at the same times and a slow arm queues instead of being sent less. Four streams:

* tool-calling chats (serving_chat's template path with tools; their prompts are compared
  across arms);
* small text chats (their dispatch delay shows whether small work waits behind big work);
* small image chats (each runs the multimodal processor, whose tokenizer call uses padding);
* a few 64 x 9 MP and 16 x 48 MP image requests spread over the phase.
"""

from __future__ import annotations

from dataclasses import dataclass

import workload


@dataclass(frozen=True)
class Planned:
    at: float  # seconds after the phase starts
    kind: str
    request: "workload.Request"


@dataclass(frozen=True)
class MixedShape:
    minutes: float = 3.0
    tool_every_s: float = 1.0
    tool_bytes: int = 200_000
    small_every_s: float = 0.5
    image_chat_every_s: float = 1.5
    # Fractions of the phase at which a large image request goes out, alternating 9 MP / 48 MP.
    large_at: tuple[float, ...] = (0.1, 0.5)

    def __post_init__(self) -> None:
        for name in ("minutes", "tool_every_s", "small_every_s", "image_chat_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"mixed traffic: {name}={getattr(self, name)!r} must be > 0")


def _times(every_s: float, length_s: float, phase_s: float) -> list[float]:
    count = int((length_s - phase_s) / every_s) + 1 if length_s > phase_s else 0
    return [round(phase_s + i * every_s, 3) for i in range(count) if phase_s + i * every_s < length_s]


def mixed_plan(shape: MixedShape) -> list[Planned]:
    """The phase's requests ordered by offset; names are unique (they are the request ids)."""
    length = shape.minutes * 60.0
    plan = [Planned(at, "tool", workload.tool_chat(f"mixed_tool_{i}", seed=5000 + i, total_bytes=shape.tool_bytes))
            for i, at in enumerate(_times(shape.tool_every_s, length, 0.0))]
    plan += [Planned(at, "small", workload.small_chat(f"mixed_small_{i}", seed=7000 + i))
             for i, at in enumerate(_times(shape.small_every_s, length, 0.25))]
    plan += [Planned(at, "image_chat", workload.images_chat(
                 f"mixed_image_chat_{i}", seed=9000 + i, pngs=[workload.png(256, 256, 9000 + i), workload.png(200, 300, 9500 + i)]))
             for i, at in enumerate(_times(shape.image_chat_every_s, length, 0.6))]
    for i, fraction in enumerate(shape.large_at):
        if i % 2 == 0:
            req = workload.large_images_chat(f"mixed_64x9MP_{i}", 6900 + i, workload.MP9, 64)
        else:
            req = workload.large_images_chat(f"mixed_16x48MP_{i}", 4800 + i, workload.MP48, 16)
        plan.append(Planned(round(fraction * length, 3), "large_images", req))
    return sorted(plan, key=lambda item: (item.at, item.request.name))
