"""The fake scheduler against the real sglang: ZMQ framing, the reply's fields, the plugin hook.

tools/sglang_server/in_container/fake_scheduler.py. Runs where sglang imports (the stock CPU image:
//lab:fake_scheduler_test; or a venv).
"""

from __future__ import annotations

import sys
from array import array
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "sglang_server" / "in_container"))

import fake_scheduler  # noqa: E402

zmq = pytest.importorskip("zmq")
io_struct = pytest.importorskip("sglang.srt.managers.io_struct")


def tokenized(rid: str, n_tokens: int):
    from sglang.srt.sampling.sampling_params import SamplingParams

    return io_struct.TokenizedGenerateReqInput(
        rid=rid,
        input_text=None,
        input_ids=array("q", range(n_tokens)),
        input_embeds=None,
        mm_inputs=None,
        token_type_ids=None,
        sampling_params=SamplingParams(max_new_tokens=1),
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=False,
    )


def test_ready_message_has_the_keys_engine_reads():
    info = fake_scheduler.init_info()
    assert set(info) == {"status", "max_total_num_tokens", "max_req_input_len", "startup_time"}
    assert info["status"] == "ready"
    assert info["max_req_input_len"] >= 2_000_000  # the 5 MB bodies are ~0.7-1.1 M tokens


def test_reply_survives_the_wire_format_and_reports_the_prompt_length():
    reply = fake_scheduler.reply_for(tokenized("rid-1", 1234))
    decoded = io_struct.msgpack_decode(io_struct.msgpack_encode(reply))
    assert isinstance(decoded, io_struct.BatchStrOutput)
    assert decoded.rids == ["rid-1"]
    assert decoded.prompt_tokens == [1234]
    assert decoded.finished_reasons[0]["type"] == "length"
    assert decoded.output_strs == [fake_scheduler.REPLY_TEXT]


def test_reply_fills_every_field_the_tokenizer_manager_indexes_per_request():
    # TokenizerManager._handle_batch_output reads field[i] of these for every output without
    # checking for None (0.5.19); a None there kills the server's output loop.
    reply = fake_scheduler.reply_for(tokenized("rid-2", 3))
    for field in ("finished_reasons", "prompt_tokens", "retraction_counts", "reasoning_tokens",
                  "completion_tokens", "cached_tokens", "output_strs"):
        value = getattr(reply, field)
        assert isinstance(value, list) and len(value) == 1, field


def test_framing_over_real_zmq_sockets(tmp_path: Path):
    from sglang.srt.managers.io_struct import sock_recv, sock_send

    ports = SimpleNamespace(
        scheduler_input_ipc_name=f"ipc://{tmp_path}/scheduler_input",
        tokenizer_ipc_name=f"ipc://{tmp_path}/tokenizer",
    )
    context = zmq.Context()
    # The TokenizerManager's side binds both (sglang-targets.md §5.3).
    to_scheduler = context.socket(zmq.PUSH)
    to_scheduler.bind(ports.scheduler_input_ipc_name)
    from_scheduler = context.socket(zmq.PULL)
    from_scheduler.bind(ports.tokenizer_ipc_name)
    from_scheduler.setsockopt(zmq.RCVTIMEO, 10_000)
    fake = fake_scheduler.FakeScheduler(None, ports, 0, 0)
    try:
        req = tokenized("rid-3", 500)
        req.wrap_pickle_fields()
        sock_send(to_scheduler, req)
        seen = fake.handle(fake._recv_one())
        assert [(s.kind, s.rid, s.input_ids) for s in seen] == [("TokenizedGenerateReqInput", "rid-3", 500)]
        reply = sock_recv(from_scheduler)
        assert isinstance(reply, io_struct.BatchStrOutput)
        assert reply.rids == ["rid-3"] and reply.prompt_tokens == [500]

        # An abort is consumed without a reply.
        sock_send(to_scheduler, io_struct.AbortReq(rid="rid-3"))
        assert [s.kind for s in fake.handle(fake._recv_one())] == ["AbortReq"]
        with pytest.raises(zmq.Again):
            from_scheduler.recv(zmq.NOBLOCK)

        # The server's SIGTERM path sends a ShutdownReq and waits for the scheduler process to
        # exit: the loop returns (without it every engine stop waited out sglang's 15 s).
        sock_send(to_scheduler, io_struct.ShutdownReq())
        assert [s.kind for s in fake.handle(fake._recv_one())] == ["ShutdownReq"]
        assert fake.gracefully_exit
        fake.run_event_loop()  # returns at once: the loop has ended
    finally:
        fake.release_host_resources()
        to_scheduler.close(linger=0)
        from_scheduler.close(linger=0)
        context.term()


def test_plugin_is_discovered_and_replaces_the_scheduler_class():
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == fake_scheduler.PLUGIN_NAME]
    assert [ep.value for ep in found] == ["fake_scheduler:register"]

    from sglang.srt.managers import scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry

    original = scheduler.Scheduler
    try:
        found[0].load()()
        HookRegistry.apply_hooks()
        assert scheduler.Scheduler is fake_scheduler.FakeScheduler
    finally:
        scheduler.Scheduler = original
        HookRegistry.reset()


def test_features_digest_sees_the_bytes_the_scheduler_reads():
    """The digest the lab compares across arms: equal for the same features whether they came
    in-process or through a /dev/shm segment, different for one changed byte, dtype or shape."""
    import pickle

    import torch
    from sglang.srt.managers.mm_utils import ShmPointerMMData

    def inputs(feature, grid=torch.tensor([[1, 16, 16]])):
        item = SimpleNamespace(modality="IMAGE", offsets=[(3, 259)], feature=feature, precomputed_embeddings=None,
                               model_specific_data={"image_grid_thw": grid})
        return SimpleNamespace(mm_items=[item])

    pixels = torch.rand(3, 896, 896)
    reference = fake_scheduler.features_digest(inputs(pixels))
    through_shm = pickle.loads(pickle.dumps(ShmPointerMMData(pixels))).materialize()
    assert fake_scheduler.features_digest(inputs(through_shm)) == reference
    changed = pixels.clone()
    changed.view(torch.uint8).view(-1)[12345] ^= 1
    assert fake_scheduler.features_digest(inputs(changed)) != reference
    assert fake_scheduler.features_digest(inputs(pixels.reshape(3, 896 * 896))) != reference
    assert fake_scheduler.features_digest(inputs(pixels.to(torch.bfloat16))) != reference
    assert fake_scheduler.features_digest(inputs(pixels, grid=torch.tensor([[1, 32, 8]]))) != reference
