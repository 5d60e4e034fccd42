"""Shared fixtures for the v3 off-loop patch tests.

The tests import `sglang` from sys.path, so the same suite runs against a patched tree, the stock
0.5.19 tree, or the installed package inside the image; v4 runs the same files on 0.5.23 (its
image and its stock base), and `sglang_version()` tells a test which release it is on. Nothing here needs a GPU, a model download
or a running scheduler: real sglang classes are built with `object.__new__` and given only the
attributes the method under test reads.

Markers: `detects_stock_bug` tests fail on stock 0.5.19 (where preprocessing and the shm copy
run on the event loop); `detects_previous_v3` tests fail on the first v3 patches (commit dcb8d7f:
a tokenizer shared by the loop and the worker, one FIFO lane, shielded shm copies); both pass
with the current patches; every other test passes on all three trees. `timing` tests measure
time and run in their own (retried) target; every other test is deterministic: where it checks
that the loop kept running while X ran off the loop, X waits on an event only the loop sets, so
inline execution fails every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import random
import string
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Iterator, List, Optional

import pytest

# These tests stand in for the HTTP server, where the offload children are on by default
# (offload_process.serve_http); a test of library mode (children off) unsets it.
os.environ.setdefault("SGLANG_OFFLOAD_IN_HTTP_SERVER", "1")

# The hard limit of a blocking stand-in: only reached when the code under test ran it inline
# on the loop (so the loop could not release it); a regression then fails instead of hanging.
HOLD_SECONDS = 5.0
# On the stock image (//recipes:stock_cpu_test, which tools/podman runs with
# GLM53_SUITE_EXPECT=stock-bugs) a detects_stock_bug test is expected to fail, and most do by
# a hold timing out: there the holds of those tests last this fraction of HOLD_SECONDS. Each
# still fails by its own check (released_by_loop is False); every other test keeps the full hold.
SUITE_EXPECT_ENV = "GLM53_SUITE_EXPECT"
STOCK_BUG_HOLD_FACTOR = 0.1


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "detects_stock_bug: fails on stock sglang (0.5.19 for v3, 0.5.23 for v4: work done on "
        "the event loop); passes with the off-loop patches",
    )
    config.addinivalue_line(
        "markers",
        "detects_previous_v3: fails on the first v3 off-loop patches (dcb8d7f); passes with "
        "the current ones",
    )
    config.addinivalue_line(
        "markers", "timing: measures time; runs in a separate target with a retry budget"
    )
    config.addinivalue_line(
        "markers",
        "detects_stock_bug_on(*versions): detects_stock_bug on the stock base of these SGLang "
        "versions only (the suite also runs in the v4 image, on 0.5.23)",
    )


def sglang_version() -> str:
    """The SGLang release under test (0.5.19: v3 and its stock base; 0.5.23: v4 and its)."""
    from sglang.version import __version__

    return __version__


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    # detects_stock_bug_on("0.5.19"): a bug of that release's stock code only; on it the test
    # is a detects_stock_bug test (the suite runner reads the markers of each item).
    versions = [item for item in items if item.get_closest_marker("detects_stock_bug_on")]
    if not versions:
        return
    version = sglang_version()
    for item in versions:
        for mark in item.iter_markers("detects_stock_bug_on"):
            if version in mark.args:
                item.add_marker(pytest.mark.detects_stock_bug)
                break


def pytest_report_header(config: pytest.Config) -> str:
    # Shows which sglang tree (stock, patched, image) the run imported.
    import sglang

    return f"sglang under test: {sglang.__path__[0]}"


@dataclass
class Hold:
    """A blocking call stand-in: it records where it ran, then blocks until `released` is set or
    `seconds` have passed. A test sets `released` from a loop task, so a call that runs on the
    event loop is never released by it: it times out (`released_by_loop` is False) every time.
    Deep copies share the hold (a copied tokenizer keeps its instrumentation)."""

    seconds: float = HOLD_SECONDS
    started: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    threads: List[str] = field(default_factory=list)
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    released_by_loop: Optional[bool] = None

    def __call__(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.started_at = time.monotonic()
        self.started.set()
        self.released_by_loop = self.released.wait(self.seconds)
        self.ended_at = time.monotonic()

    def __deepcopy__(self, memo: dict) -> "Hold":
        return self

    async def wait_started(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.started.is_set():
            assert time.monotonic() < deadline, "the held call never started"
            await asyncio.sleep(0.005)

    async def release_when_started(self) -> None:
        """From a loop task: release the call once it has started. Runs only while the loop
        is free, i.e. only if the call is off the loop."""
        await self.wait_started()
        self.released.set()

    async def run_released_by_loop(self, call: Awaitable[Any]) -> Any:
        """Await `call` with a loop task that releases the hold once it has started."""
        releaser = asyncio.create_task(self.release_when_started())
        try:
            return await call
        finally:
            self.released.set()
            await releaser


@pytest.fixture
def hold_factory(request: pytest.FixtureRequest) -> Callable[..., Hold]:
    """`Hold`, with a short hold for a test expected to fail on the stock image."""
    expected_to_fail = (os.environ.get(SUITE_EXPECT_ENV) == "stock-bugs"
                        and request.node.get_closest_marker("detects_stock_bug") is not None)
    seconds = HOLD_SECONDS * (STOCK_BUG_HOLD_FACTOR if expected_to_fail else 1.0)
    return functools.partial(Hold, seconds=seconds)


def _train_tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained in memory on synthetic words, wrapped as a HF fast
    tokenizer with a small chat template: real tokenizer code, no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    words = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))
        for _ in range(300)
    ]
    corpus = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(2000)]
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",  # processors call the tokenizer with padding=True
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return tokenizer


@pytest.fixture(scope="module")
def published_server_args() -> Iterator[None]:
    """The server arguments SGLang's module getters read (`get_serving()`; 0.5.23's serving
    classes call it when they are built): defaults published for the module when no one has
    published any; arguments another module published in this process stay."""
    from sglang.srt.runtime_context import get_context, get_serving

    try:
        get_serving()
    except ValueError:
        with get_context().override_server_args():
            yield
        return
    yield


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    """The 500-token toy: only where a test says why it needs a small vocabulary."""
    return _train_tiny_tokenizer()


@pytest.fixture(scope="session")
def glm_tokenizer() -> Any:
    """The default tokenizer of these tests: GLM-class (glm_tokenizer.py: 151,552 tokens, a 7 MB
    backend JSON, GLM special tokens and a tool-calling chat template), as production serves."""
    import glm_tokenizer as glm

    return glm.build_tokenizer()


def tokenizer_manager_modules() -> List[Any]:
    """The modules TokenizerManager's code looks its globals up in: SGLang's tokenizer_manager,
    and on v3 also the package module its mixin comes from (glm53_offload)."""
    from sglang.srt.managers import tokenizer_manager

    try:
        from glm53_offload import tokenizer_manager_hooks
    except ImportError:  # stock, or a v3 before the package
        return [tokenizer_manager]
    return [tokenizer_manager, tokenizer_manager_hooks]


def tokenizer_manager_global(name: str, default: Any = None) -> Any:
    """`name` as TokenizerManager's code sees it (the first module that has it)."""
    for module in tokenizer_manager_modules():
        if name in module.__dict__:
            return module.__dict__[name]
    return default


def patch_tokenizer_manager_global(monkeypatch: pytest.MonkeyPatch, name: str, value: Any) -> None:
    """Replace `name` in every module of tokenizer_manager_modules() that has it."""
    for module in tokenizer_manager_modules():
        if name in module.__dict__:
            monkeypatch.setattr(module, name, value)


def request_body_module() -> Any:
    """Where the HTTP server's request-body handling lives: glm53_offload.http_body (v3, v4),
    else the http_server module (stock, which has no limit and no body parser)."""
    try:
        from glm53_offload import http_body
    except ImportError:
        from sglang.srt.entrypoints import http_server

        return http_server
    return http_body


def large_body_parser() -> Any:
    """The server's JSON child pool for large bodies (None: stock, or switched off)."""
    return getattr(request_body_module(), "LARGE_BODY_PARSER", None)


def new_tokenizer_manager(tokenizer: Any = None) -> Any:
    """A bare `TokenizerManager`: `object.__new__` plus the attributes the tested methods read.
    The preprocessing workers are created through the patch's own init hook when the tree has
    it (stock 0.5.19 has none, so its methods run inline on the loop)."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    tm = object.__new__(TokenizerManager)
    tm.tokenizer = tokenizer
    tm.async_dynamic_batch_tokenizer = None
    tm.server_args = SimpleNamespace(
        default_chat_template_kwargs=None,
        revision=None,
        tokenizer_metrics_allowed_custom_labels=None,
        context_length=None,
        allow_auto_truncate=False,
    )
    tm.model_config = SimpleNamespace(
        is_embedding_gemma=False,
        is_multimodal=False,
        context_len=4096,
        model_path="tiny",
        get_default_sampling_params=lambda: {},
        hf_config=SimpleNamespace(
            model_type="llama",
            architectures=["LlamaForCausalLM"],
            to_dict=lambda: {},
        ),
    )
    tm.model_path = "tiny"
    tm.config_value = lambda key: None
    tm.request_logger = SimpleNamespace(log_requests=False, log_requests_level=0)
    # Dispatch-side stand-ins (used by the shm tests).
    tm.dispatched = []
    tm._dispatch_to_scheduler = tm.dispatched.append
    tm.cuda_vmm_feature_transport = SimpleNamespace(
        prepare_for_dispatch=lambda mm_inputs_batch: [],
        cancel_for_dispatch=lambda items: None,
    )
    if sglang_version() != "0.5.19":
        # 0.5.23's _send_one_request also awaits the feature transport, prepares positional
        # embeddings and marks the request's state dispatched.
        async def prepare_for_dispatch_async(mm_inputs_batch: Any) -> list:
            return []

        tm.cuda_vmm_feature_transport.prepare_for_dispatch_async = prepare_for_dispatch_async
        tm.positional_embeds_transport = SimpleNamespace(
            prepare_for_dispatch=lambda objs: [],
            cancel_for_dispatch=lambda items: None,
        )
        tm.encoder_dispatch_ready = {}
        tm.rid_to_state = {}
        tm.enable_lora = False  # _handle_abort_req releases a request's LoRA
        # _validate_one_request checks a Clef/Kev checkpoint's decision layout.
        tm.model_config.joint_head_config = None
        tm.model_config.pointer_head = None
    init = getattr(tm, "init_request_preprocessing", None)
    if init is not None:
        init()
    return tm


@pytest.fixture
def make_tokenizer_manager() -> Iterator[Callable[..., Any]]:
    """Builds `new_tokenizer_manager`s and shuts their workers down after the test."""
    built: List[Any] = []

    def build(tokenizer: Any = None) -> Any:
        tm = new_tokenizer_manager(tokenizer)
        built.append(tm)
        return tm

    yield build

    for tm in built:
        shutdown = getattr(tm, "shutdown_request_preprocessing", None)
        if shutdown is not None:
            shutdown()


class Scheduler:
    """The receiving end of the tokenizer manager's PUSH socket, read as the scheduler reads it."""

    def __init__(self, pull: Any) -> None:
        self.pull = pull

    def receive(self) -> Any:
        from sglang.srt.managers.io_struct import sock_recv

        assert self.pull.poll(10_000), "nothing reached the scheduler socket within 10 s"
        return sock_recv(self.pull)

    def assert_first_is(self, rid: str, if_abort: str) -> None:
        """The first message the scheduler reads is the request `rid`: not an AbortReq (`if_abort`
        says what one would mean), not another request."""
        from sglang.srt.managers.io_struct import AbortReq

        received = self.receive()
        assert not isinstance(received, AbortReq), if_abort
        assert received.rid == rid, f"the scheduler got {received.rid!r} first"


@contextlib.contextmanager
def dispatching_manager(tm: Any, address: str) -> Iterator[Scheduler]:
    """Give a `new_tokenizer_manager` what `_tokenize_one_request`, `_send_one_request` and
    `abort_request` read, with its real `_dispatch_to_scheduler` sending on a real ZMQ PUSH
    socket (as `init_ipc_channels` builds it) to `address`; yields the scheduler's end. Server
    args are published for the module getters those methods call (`get_exec()`, ...)."""
    import zmq
    import zmq.asyncio

    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.runtime_context import get_context

    overrides = get_context().override_server_args()
    overrides.install()
    del tm._dispatch_to_scheduler  # new_tokenizer_manager's recording stand-in
    tm.rid_to_state = {}
    tm.mm_processor = None
    tm.context_len = 1 << 30
    tm.num_reserved_tokens = 0
    tm.allow_auto_truncate = False
    tm.validate_total_tokens = True
    tm.is_generation = True
    tm.preferred_sampling_params = None
    if "sampling_params_class" not in tm.__dict__:
        from sglang.srt.sampling.sampling_params import SamplingParams

        tm.sampling_params_class = SamplingParams
    tm.model_config.vocab_size = len(tm.tokenizer) if tm.tokenizer is not None else 1 << 20
    tm.enable_trace = False
    tm.enable_metrics = False
    tm.disaggregation_mode = DisaggregationMode.NULL
    tm.tokenizer_ipc_name = None
    receiver_context, sender_context = zmq.Context(), zmq.asyncio.Context()
    pull = receiver_context.socket(zmq.PULL)
    pull.bind(address)
    tm.send_to_scheduler = sender_context.socket(zmq.PUSH)
    tm.send_to_scheduler.connect(address)
    try:
        yield Scheduler(pull)
    finally:
        tm.send_to_scheduler.close(linger=0)
        pull.close(linger=0)
        sender_context.term()
        receiver_context.term()
        overrides.restore()


async def submit_until_dispatch(tm: Any, obj: Any) -> None:
    """What generate_request does for one normalized request up to its dispatch."""
    from sglang.srt.managers.io_struct import AbortReq

    tm._init_req_state(obj)
    send_unless_aborted = getattr(tm, "_tokenize_unless_aborted", None)
    if send_unless_aborted is not None:  # offload-process.diff: generate_request's own step
        if await send_unless_aborted(obj):
            tm._handle_abort_req(AbortReq(rid=obj.rid, abort_message="Aborted before dispatch"))
        return
    tokenized = await tm._tokenize_one_request(obj)
    if obj.return_prompt_token_ids and tm.rid_to_state[obj.rid].prompt_token_ids is None:
        # Stock and the earlier v3 set it in generate_request, from the array, on the loop.
        tm.rid_to_state[obj.rid].prompt_token_ids = list(tokenized.input_ids)
    sent = tm._send_one_request(tokenized)
    if inspect.isawaitable(sent):  # a coroutine since shm-off-loop.diff
        await sent


@pytest.fixture
def dispatch_helpers() -> SimpleNamespace:
    """`dispatching_manager` and `submit_until_dispatch`, for test modules (several test
    directories have a conftest.py, so a test module cannot import this one by name)."""
    return SimpleNamespace(manager=dispatching_manager, submit_until_dispatch=submit_until_dispatch)
