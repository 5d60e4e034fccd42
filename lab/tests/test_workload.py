"""The seeded request bodies: exact sizes, the same bytes every run, valid JSON and PNGs."""

from __future__ import annotations

import hashlib
import json
import sys
import zlib
from pathlib import Path

import pytest

# workload.py imports synthetic_text by name, as in the containers, where both directories are
# staged as one.
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "sglang_server" / "in_container"))
sys.path.insert(0, str(REPO / "lab" / "in_container"))

import synthetic_text  # noqa: E402
import workload  # noqa: E402


def test_text_is_a_pure_function_of_seed_and_size():
    a = synthetic_text.text_of_size(5, 50_000)
    assert a == synthetic_text.text_of_size(5, 50_000)
    assert a != synthetic_text.text_of_size(6, 50_000)
    assert len(a.encode("ascii")) == 50_000
    # Prefix-stable: bodies are fitted by taking prefixes.
    assert synthetic_text.text_of_size(5, 60_000).startswith(a)


@pytest.mark.parametrize("make, size", [(workload.chat, 1_000_000), (workload.generate, 500_000)])
def test_bodies_have_the_requested_size(make, size):
    req = make("x", 3, size)
    assert size - 1 <= len(req.body) <= size
    json.loads(req.body)


def test_body_bytes_do_not_change_between_runs():
    # If this fails, the text generator changed: results from before and after are not comparable.
    body = workload.chat("x", 47, 20_000).body
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(workload.chat("x", 47, 20_000).body).hexdigest()
    assert json.loads(body)["messages"][0]["content"].startswith(synthetic_text.text_of_size(47, 40))


def test_conversations_alternate_and_end_with_the_user():
    messages = json.loads(workload.conversation("f", 1, 200_000, turns=5).body)["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    with pytest.raises(ValueError):
        workload.conversation("f", 1, 200_000, turns=4)
    assert json.loads(workload.conversation("f", 2, 200_000).body) != json.loads(workload.conversation("f", 1, 200_000).body)


def test_png_is_well_formed():
    data = workload.png(8, 4, seed=1)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length = int.from_bytes(data[8:12], "big")
    assert data[12:16] == b"IHDR" and length == 13
    idat_at = data.index(b"IDAT")
    idat_len = int.from_bytes(data[idat_at - 4:idat_at], "big")
    raw = zlib.decompress(data[idat_at + 4:idat_at + 4 + idat_len])
    assert len(raw) == 4 * (1 + 8 * 3)


def test_large_pngs_have_the_declared_pixels_and_stay_small():
    data = workload.pattern_png(3000, 3000, seed=1)
    assert data == workload.pattern_png(3000, 3000, seed=1)
    assert int.from_bytes(data[16:20], "big") == 3000 and int.from_bytes(data[20:24], "big") == 3000
    idat_at = data.index(b"IDAT")
    raw = zlib.decompress(data[idat_at + 4:idat_at + 4 + int.from_bytes(data[idat_at - 4:idat_at], "big")])
    assert len(raw) == 3000 * (1 + 3000 * 3)  # every pixel is there to decode
    assert len(data) < 1_000_000  # yet the body of 64 such images stays tens of MB


def test_tool_chat_carries_tools_and_a_tool_turn():
    body = json.loads(workload.tool_chat("t", 3, 50_000).body)
    assert body["rid"] == "t" and len(body["tools"]) == 8
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert body["tools"][0]["type"] == "function"  # the OpenAI wrapper a flattening retry would drop
    assert 40_000 < len(workload.tool_chat("t", 3, 50_000).body) < 60_000
    assert workload.tool_chat("t", 3, 50_000).body != workload.tool_chat("t", 4, 50_000).body


def test_mixed_plan_is_fixed_open_loop_and_names_are_unique():
    import mixed_plan

    shape = mixed_plan.MixedShape(minutes=0.2, tool_bytes=20_000, large_at=())  # large ones: seconds to build
    plan = mixed_plan.mixed_plan(shape)
    names = [item.request.name for item in plan]
    assert len(set(names)) == len(names)
    assert [item.at for item in plan] == sorted(item.at for item in plan)
    assert all(0 <= item.at < 12.0 for item in plan)
    kinds = {item.kind for item in plan}
    assert kinds == {"tool", "small", "image_chat"}
    assert sum(1 for item in plan if item.kind == "tool") == 12  # every 1 s for 12 s
    assert [item.request.body for item in plan] == [item.request.body for item in mixed_plan.mixed_plan(shape)]
    with pytest.raises(ValueError, match="tool_every_s"):
        mixed_plan.MixedShape(tool_every_s=0)


def test_prompt_chars_count_the_prompt_text_not_the_body():
    chat = workload.chat("c", 3, 300_000)
    assert chat.prompt_chars == len(json.loads(chat.body)["messages"][0]["content"])
    assert workload.generate("g", 3, 300_000).prompt_chars == len(json.loads(workload.generate("g", 3, 300_000).body)["text"])
    conversation = workload.conversation("f", 1, 400_000)
    assert conversation.prompt_chars == sum(len(m["content"]) for m in json.loads(conversation.body)["messages"])
    images = workload.images_chat("i", 9, [workload.png(8, 8, 1)])
    assert images.prompt_chars == 2000  # the text part only: the image's base64 is not prompt text
    tool = workload.tool_chat("t", 3, 200_000)
    # the mixed phase's tool chats stay under v3's tokenizer-process threshold; the text requests are far above
    assert tool.prompt_chars < workload.TOKENIZER_PROCESS_MIN_CHARS < chat.prompt_chars
    assert workload.small_chat("s", 5).prompt_chars == 200


def test_large_prompts_per_phase():
    import session

    big, small = workload.chat("big", 1, 300_000), workload.small_chat("small", 2)
    records = [session.Sent(r.name, r.path, len(r.body), "x", prompt_chars=r.prompt_chars)
               for r in (big, small)]
    records.append({"name": "late", "error": "still running", "body_bytes": 2_000_000, "prompt_chars": 1_999_000})
    images = workload.images_chat("i", 9, [workload.png(8, 8, 1), workload.png(8, 8, 2)])
    assert images.images == 2
    records.append(session.Sent(images.name, images.path, len(images.body), "x", images=images.images))
    assert session.phase_counts(records) == {"requests": 4, "large_prompts": 2, "large_bodies": 1, "image_requests": 1}
