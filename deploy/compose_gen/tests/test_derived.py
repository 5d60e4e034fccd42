"""Derived values: config_variant from the row and its release, engine_image on 3 consumers."""

from __future__ import annotations

import dataclasses

import pytest

from deploy.compose_gen import tables as tables_mod
from deploy.compose_gen.errors import TableError
from deploy.releases import EVENT_LOOP_V3_PATCHES, ReleaseError, load_release
from deploy.compose_gen.resolve import config_variant
from conftest import FIXTURE_RELEASES, LONG_CONTEXT
import yamlview

R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"


def _deployment(tables):
    common = tables_mod.load_common(tables.common)
    return tables_mod.load_deployment(tables.path(LONG_CONTEXT), common)


def test_canary_state_variants(tables, records):
    dep = _deployment(tables)
    r1, r2 = dep.replicas
    assert (r1.release, r2.release) == ("glm53_v2", "glm53_v3")
    assert config_variant(dep, r1, records["glm53_v2"]) == (
        "glm53-long-context-w4afp8-c8192-qsplit-hicache-cuda-host-pooled-v1-"
        "admission-reserve-disabled-pool-clamp-pdi1-h200-tp4-ep4-eagle-adaptive-5-1-6")
    assert config_variant(dep, r2, records["glm53_v3"]) == (
        "glm53-long-context-w4afp8-c8192-qsplit-offloop-v3-host650g-hicache-cuda-host-pooled-v1-"
        "admission-reserve-disabled-pool-clamp-pdi2-h200-tp4-ep4-eagle-adaptive-5-1-6")


@pytest.mark.parametrize("qsplit", [True, False])
@pytest.mark.parametrize("release", ["glm53_v2", "glm53_v3"])
def test_markers_follow_row_and_release(tables, records, qsplit, release):
    dep = _deployment(tables)
    row = dataclasses.replace(dep.replicas[0], dsa_qsplit=qsplit, chunked_prefill_size=4096,
                              prefill_decode_interval=3, telemetry_markers=("host650g",))
    variant = config_variant(dep, row, records[release])
    assert ("-qsplit-" in variant) is qsplit
    assert ("-offloop-v3-" in variant) is (release == "glm53_v3")
    assert "-c4096-" in variant and "-pdi3-" in variant and "-host650g-" in variant


def test_offloop_marker_comes_from_the_record_patches(tmp_path, records):
    # A record whose patches list lacks the v3 event-loop patches gets no offloop-v3 marker,
    # whatever its name says; a partial v3 set is refused.
    text = (FIXTURE_RELEASES / "glm53_v3.json").read_text()
    lean = tmp_path / "glm53_v3.json"
    for name in EVENT_LOOP_V3_PATCHES:
        text = text.replace(f'"name": "{name}"', f'"name": "renamed-{name}"')
    lean.write_text(text)
    assert not load_release("glm53_v3", lean).has_event_loop_v3
    partial = (FIXTURE_RELEASES / "glm53_v3.json").read_text().replace(
        '"name": "shm-off-loop"', '"name": "other"')
    lean.write_text(partial)
    with pytest.raises(ReleaseError, match="v3 event-loop patches ship together"):
        _ = load_release("glm53_v3", lean).has_event_loop_v3


def test_engine_image_identical_on_three_consumers(tables, records):
    doc = yamlview.load(tables.generate(LONG_CONTEXT, records).text)
    for service, release in ((R1, "glm53_v2"), (R2, "glm53_v3")):
        rec = records[release]
        short = rec.digest.split(":")[1][:12]
        svc = doc["services"][service]
        assert svc["image"] == f"{rec.repository}@{rec.digest}"
        assert svc["labels"]["nearai.otel.engine_image"] == short
        assert yamlview.log_tags(doc, service)["engine_image"] == short
        assert yamlview.scrape_labels(doc, service)["engine_image"] == short
        variant = svc["labels"]["nearai.otel.config_variant"]
        assert yamlview.log_tags(doc, service)["config_variant"] == variant
        assert yamlview.scrape_labels(doc, service)["config_variant"] == variant


def test_per_replica_argv_and_env(tables, records):
    doc = yamlview.load(tables.generate(LONG_CONTEXT, records).text)
    for service, pdi, port, budget in ((R1, "1", "29510", "${GLM53_HICACHE_RAM_BUDGET:-406GiB}"),
                                       (R2, "2", "29511",
                                        "${GLM53_R2_HICACHE_RAM_BUDGET:-650GiB}")):
        cmd = doc["services"][service]["command"]
        assert cmd[:2] == ["sglang", "serve"]
        assert cmd[cmd.index("--chunked-prefill-size") + 1] == "8192"
        assert cmd[cmd.index("--prefill-decode-interval") + 1] == pdi
        assert cmd[cmd.index("--dist-init-addr") + 1] == f"127.0.0.1:{port}"
        env = doc["services"][service]["environment"]
        assert env["SGLANG_DSA_INDEXER_QSPLIT"] == "1"
        assert env["SGLANG_HICACHE_RAM_BUDGET"] == budget
        assert env["HF_HUB_OFFLINE"] == "1"  # merged from the shared anchor
        # Every flag once.
        flags = [t for t in cmd if t.startswith("--")]
        assert len(flags) == len(set(flags))


def test_split_off_emits_no_split_env(tables, records):
    doc = yamlview.load(tables.generate("glm53_tp4_fp8.toml", records).text)
    for service in ("model-sg-glm53-fp8-tp4-r1", "model-sg-glm53-fp8-tp4-r2"):
        env = doc["services"][service]["environment"]
        assert "SGLANG_DSA_INDEXER_QSPLIT" not in env
        assert not any(k.startswith("SGLANG_HICACHE") for k in env)
        assert "-qsplit-" not in doc["services"][service]["labels"]["nearai.otel.config_variant"]


def test_stall_dump_kill_switch_only_on_engines_whose_release_carries_it(tables, records):
    doc = yamlview.load(tables.generate(LONG_CONTEXT, records).text)
    # r2 runs v3 (the stall dump is on by default, SGLANG_EVENT_LOOP_STALL_DUMP_SECS=0 turns it
    # off): its own host variable, defaulting to the declared 30 s. r1 runs v2: no switch.
    assert doc["services"][R2]["environment"]["SGLANG_EVENT_LOOP_STALL_DUMP_SECS"] == \
        "${GLM53_R2_EVENT_LOOP_STALL_DUMP_SECS:-30}"
    assert "SGLANG_EVENT_LOOP_STALL_DUMP_SECS" not in doc["services"][R1]["environment"]
    assert "SGLANG_EVENT_LOOP_STALL_DUMP_SECS" not in doc["x-glm53-engine-env"]
    # The default follows the release's recorded switch, not a typed value.
    lean = records["glm53_v3"]
    stall = next(p for p in lean.patches if p.name == "event-loop-stall-dump")
    assert stall.kill_switch == ("SGLANG_EVENT_LOOP_STALL_DUMP_SECS", "30")


def test_a_table_may_not_type_a_derived_kill_switch(tables, records, expect_error):
    tables.edit(LONG_CONTEXT, "[engine.environment]\n",
                '[engine.environment]\nSGLANG_EVENT_LOOP_STALL_DUMP_SECS = "0"\n')
    msg = expect_error(TableError, lambda: tables.generate(LONG_CONTEXT, records))
    assert "SGLANG_EVENT_LOOP_STALL_DUMP_SECS is derived per replica" in msg


def test_table_release_without_bound_record(tables, records):
    del records["glm53_v3"]
    with pytest.raises(TableError, match=r"\[replicas\] row r2: release 'glm53_v3' has no "
                                         r"release record bound"):
        tables.generate(LONG_CONTEXT, records)
