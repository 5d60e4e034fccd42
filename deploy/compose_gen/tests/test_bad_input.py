"""Each kind of bad table input fails generation with a message naming table and row."""

from __future__ import annotations

from deploy.compose_gen.errors import TableError
from conftest import LONG_CONTEXT


def test_tables_as_committed_generate(tables, records):
    # The baseline every case below mutates: the committed tables are valid.
    for name in ("glm53_tp4_fp8.toml", "glm53_tp4_w4afp8.toml", LONG_CONTEXT):
        assert tables.generate(name, records).text


def test_unknown_key_names_table_and_row(tables, records, expect_error):
    tables.edit(LONG_CONTEXT, "prefill_decode_interval = 2", "prefill_decode_interval = 2\n"
                "chunk_sise = 4096")
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert LONG_CONTEXT in msg
    assert "[replicas] row r2: unknown keys ['chunk_sise']" in msg
    assert "chunked_prefill_size" in msg  # lists the known keys


def test_gpu_used_by_two_replicas(tables, records, expect_error):
    tables.edit(LONG_CONTEXT, "gpus = [4, 5, 6, 7]", "gpus = [3, 5, 6, 7]")
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert f"{LONG_CONTEXT}: [replicas] row r2: GPU 3 is already used by row r1" in msg


def test_dist_init_port_used_twice(tables, records, expect_error):
    tables.edit(LONG_CONTEXT, '"127.0.0.1:29511"', '"127.0.0.1:29510"')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert (f"{LONG_CONTEXT}: [replicas] row r2: dist_init_addr port 29510 is already used "
            "by row r1") in msg


def test_chunk_not_a_multiple_of_the_page_size(tables, records, expect_error):
    tables.edit("glm53_tp4_fp8.toml", "chunked_prefill_size = 4096\nprefill_decode_interval = 1\n"
                'dist_init_addr = "127.0.0.1:29501"',
                "chunked_prefill_size = 4100\nprefill_decode_interval = 1\n"
                'dist_init_addr = "127.0.0.1:29501"')
    msg = expect_error(TableError, lambda: tables.generate("glm53_tp4_fp8.toml", records))
    assert "glm53_tp4_fp8.toml: [replicas] row r2: chunked_prefill_size 4100 is not a " \
           "multiple of the page size 64" in msg
    assert "use 4096 or 4160" in msg


def test_split_on_a_release_without_the_split_patch(tables, records, expect_error):
    tables.edit(LONG_CONTEXT, 'release = "glm53_v2"', 'release = "glm53_v1"')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert f"{LONG_CONTEXT}: [replicas] row r1: dsa_qsplit = true but release glm53_v1" in msg
    assert "lacks the dsa-indexer-qsplit patch" in msg
    assert "glm53_v2, glm53_v3" in msg  # names the releases that carry it


def test_sidecar_names_an_unknown_pin(tables, records, expect_error):
    tables.edit("common.toml", '[sidecars.nginx]\npin = "nginx"', '[sidecars.nginx]\npin = "ngnix"')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert "common.toml: [sidecars] row nginx: " in msg
    assert "no pin named 'ngnix' in pins/repository_locations.bzl" in msg


def test_sidecar_image_typed_instead_of_pinned(tables, records, expect_error):
    tables.edit("common.toml", '[sidecars.nginx]\npin = "nginx"',
                '[sidecars.nginx]\nimage = "docker.io/library/nginx:1.29-alpine"')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert "common.toml: [sidecars] row nginx: unknown keys ['image'], missing keys ['pin']; the keys are pin (optional: " in msg


def test_checkpoint_pin_of_the_wrong_kind(tables, records, expect_error):
    tables.edit("common.toml", 'pin = "hf_glm53_flash_fp8"', 'pin = "uv"')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert "[models.checkpoints] row fp8: pin uv is a image; this row needs a hf_model" in msg


def test_literal_secret_in_sidecar_environment(tables, records, expect_error):
    tables.edit("common.toml", 'OHTTP_ENABLED = "true"\nTOKEN = "${PROXY_TOKEN:?set PROXY_TOKEN}"',
                'OHTTP_ENABLED = "true"\nTOKEN = "hunter2-literal"')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert "common.toml: [sidecars.proxy-glm53.environment] row TOKEN: TOKEN holds a " \
           "literal value" in msg
    assert "${TOKEN:?set TOKEN}" in msg
    assert "hunter2" not in msg  # never echo a secret


def test_secret_with_a_default_is_still_a_literal(tables, records, expect_error):
    # ${VAR:-default} would deploy the default as the secret when the host map lacks it.
    tables.edit("common.toml", 'HF_TOKEN = "${HUGGING_FACE_HUB_TOKEN:?HUGGING_FACE_HUB_TOKEN must '
                'be set}"\nHF_HUB_OFFLINE',
                'HF_TOKEN = "${HUGGING_FACE_HUB_TOKEN:-hf_abc}"\nHF_HUB_OFFLINE')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert "common.toml: [engine.environment] row HF_TOKEN: HF_TOKEN holds a literal" in msg
    assert "hf_abc" not in msg


def test_privileged_reason_must_say_something(tables, records, expect_error):
    tables.edit("common.toml", 'pin = "vllm_proxy_rs"\n',
                'pin = "vllm_proxy_rs"\nprivileged_reason = " "\n')
    tables.edit("common.toml", "\nprivileged_reason = \"attests", "\n# privileged_reason = \"attests")
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert ("common.toml: [sidecars.proxy-glm53] row privileged_reason: privileged_reason must be "
            "a non-empty string") in msg


def test_proxy_without_a_reason_is_not_privileged(tables, records):
    tables.edit("common.toml", "\nprivileged_reason = \"attests", "\n# privileged_reason = \"attests")
    text = tables.generate(LONG_CONTEXT, records).text
    assert "privileged: true" not in text


def test_optional_secret_has_an_empty_default_only(tables, records):
    """`${VAR:-}` (the collector's ingest token) carries no value, so it is allowed."""
    text = tables.generate(LONG_CONTEXT, records).text
    assert "OTEL_GATEWAY_TOKEN: ${MONITORING_INGEST_TOKEN:-}" in text
