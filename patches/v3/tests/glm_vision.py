"""A GLM-V-class multimodal processor for the v3 tests and benchmarks, set up as the server sets
it up: sglang's `Glm4vImageProcessor` over transformers' `Glm4vProcessor` (PIL backend) with the
GLM-class tokenizer fixture, saved as a model directory whose server arguments are published, so
a child process given them builds the same processor. Also real PNG/JPEG bytes and requests in
GLM's image syntax."""

from __future__ import annotations

import base64
import io
import os
import pathlib
from dataclasses import dataclass
from typing import Any, List

IMAGE_PART = "<|begin_of_image|><|image|><|end_of_image|>"


@dataclass(frozen=True)
class GlmVision:
    server_args: Any
    hf_config: Any
    hf_processor: Any
    processor: Any  # sglang's Glm4vImageProcessor
    transport: str

    def pool(self, workers: int, max_queued: int):
        """A MultimodalProcessPool of this processor (offload-process.diff), started."""
        from glm53_offload import offload_process

        setup = offload_process.mm_setup(
            self.processor, self.server_args, self.hf_config, self.hf_processor, self.transport)
        pool = offload_process.MultimodalProcessPool(setup, workers=workers, max_queued=max_queued)
        pool.prestart()
        return pool


def build(directory: pathlib.Path, tokenizer) -> GlmVision:
    from transformers import Glm4vConfig, Glm4vProcessor
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor

    from sglang.srt.managers.mm_utils import determine_tensor_transport_mode
    from sglang.srt.multimodal.processors.glm4v import Glm4vImageProcessor
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    # The images carry no lscpu (util-linux), which ServerArgs' --device cpu memory probe runs;
    # a thread binding makes it skip the probe (the children inherit it).
    os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "all")
    # The fixture has GLM's image tokens and no video ones: videos are not covered.
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (
        "<|image|>", "<|begin_of_image|>", "<|end_of_image|>")}
    config = Glm4vConfig(
        text_config={"vocab_size": len(tokenizer) + 8, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "max_position_embeddings": 1 << 20},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "depth": 1, "num_heads": 2,
                       "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                       "temporal_patch_size": 2},
        image_token_id=ids["<|image|>"], image_start_token_id=ids["<|begin_of_image|>"],
        image_end_token_id=ids["<|end_of_image|>"],
        # Ids past the vocabulary: no prompt contains them.
        video_token_id=len(tokenizer) + 1, video_start_token_id=len(tokenizer) + 2,
        video_end_token_id=len(tokenizer) + 3,
    )
    config.architectures = ["Glm4vForConditionalGeneration"]
    config.save_pretrained(directory)
    hf_processor = Glm4vProcessor(image_processor=Glm4vImageProcessorPil(), tokenizer=tokenizer,
                                  video_processor=Glm4vVideoProcessor())
    hf_processor.save_pretrained(directory)
    server_args = ServerArgs(model_path=str(directory), enable_multimodal=True,
                             image_processor_backend="pil", device="cpu", skip_server_warmup=True)
    publish(server_args, role="tokenizer")
    transport = determine_tensor_transport_mode()
    processor = Glm4vImageProcessor(config, server_args, hf_processor, transport)
    return GlmVision(server_args, config, hf_processor, processor, transport)


def noise_png(width: int, height: int, seed: int) -> bytes:
    """Random pixels: a PNG about as large as the raw image."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def stripes_png(width: int, height: int, seed: int) -> bytes:
    """Seeded stripes: a large image in a small PNG (a photo-sized request of a modest body)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    row = rng.integers(0, 256, (1, width, 3), dtype=np.uint8)
    pixels = np.repeat(row, height, axis=0)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def noise_jpeg(width: int, height: int, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def data_url(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode("ascii")


def request(images: List[str], text: str = "Describe these. ") -> Any:
    """A normalized GenerateReqInput with one GLM image part per image."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    prompt = "[gMASK]<sop><|user|>\n" + text + IMAGE_PART * len(images) + "<|assistant|>"
    obj = GenerateReqInput(text=prompt, image_data=list(images))
    obj.normalize_batch_and_arguments()
    return obj


def mm_kwargs(obj) -> dict:
    """process_mm_data_async's arguments for the request, as the tokenizer manager passes them."""
    return dict(image_data=obj.image_data, audio_data=None, input_text=obj.text,
                request_obj=obj, max_req_input_len=1 << 20)
