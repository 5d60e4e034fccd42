"""Putting v3 on both replicas is a one-line table change that touches only what it must."""

from __future__ import annotations

import difflib

from conftest import LONG_CONTEXT, TABLES_DIR
import yamlview

R1 = "model-sg-glm53-w4afp8-tp4-r1"
FLIP = ('release = "glm53_v2"', 'release = "glm53_v3"')


def _all_paths(text: str) -> dict[str, object]:
    doc = yamlview.load(text)
    flat = yamlview.flatten(doc)
    flat.update({f"otel:{k}": v for k, v in yamlview.flatten(yamlview.otel_config(doc)).items()})
    return flat


def test_flip_is_one_table_line(tables):
    before = (TABLES_DIR / LONG_CONTEXT).read_text().splitlines()
    tables.edit(LONG_CONTEXT, *FLIP)
    after = tables.path(LONG_CONTEXT).read_text().splitlines()
    changed = [l for l in difflib.unified_diff(before, after, lineterm="", n=0)
               if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert changed == ['-release = "glm53_v2"', '+release = "glm53_v3"']


def test_flip_changes_only_r1_image_its_two_labels_and_the_header(tables, records):
    canary = tables.generate(LONG_CONTEXT, records).text
    tables.edit(LONG_CONTEXT, *FLIP)
    both_v3 = tables.generate(LONG_CONTEXT, records).text

    a, b = _all_paths(canary), _all_paths(both_v3)
    # v3 carries the stall dump, so r1 gains its own kill switch (and nothing else new).
    switch = f"services.{R1}.environment.SGLANG_EVENT_LOOP_STALL_DUMP_SECS"
    assert b.keys() - a.keys() == {switch} and a.keys() <= b.keys()
    assert b.pop(switch) == "${GLM53_R1_EVENT_LOOP_STALL_DUMP_SECS:-30}"
    changed = {k for k in a if a[k] != b[k]}
    job_names = [v for k, v in a.items() if k.endswith(".job_name")]
    r1_job = [k for k, v in a.items() if v == f"sglang-{R1}"][0].rsplit(".", 1)[0]
    assert job_names.count(f"sglang-{R1}") == 1
    jobs = f"{r1_job}.static_configs[0].labels"
    assert changed == {
        f"services.{R1}.image",
        f"services.{R1}.labels.com.datadoghq.ad.logs",  # engine_image + config_variant tags
        f"services.{R1}.labels.nearai.otel.engine_image",
        f"services.{R1}.labels.nearai.otel.config_variant",
        # The embedded collector config as a whole, and inside it r1's two scrape labels.
        "configs.otelcol_app_config.content",
        f"{jobs}.engine_image",
        f"{jobs}.config_variant",
    }
    v3 = records["glm53_v3"]
    assert b[f"services.{R1}.image"] == v3.image
    assert b[f"services.{R1}.labels.nearai.otel.engine_image"] == v3.engine_image
    assert "-offloop-v3-" in b[f"services.{R1}.labels.nearai.otel.config_variant"]
    assert "-offloop-v3-" not in a[f"services.{R1}.labels.nearai.otel.config_variant"]

    # Text view: outside the header, every changed line is r1's image or one of its labels.
    diff = [l for l in difflib.unified_diff(canary.splitlines(), both_v3.splitlines(),
                                            lineterm="", n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    old_short, new_short = records["glm53_v2"].engine_image, v3.engine_image
    for line in diff:
        body = line[1:]
        if body.startswith("#"):
            continue  # header
        assert (old_short in body or new_short in body or "config_variant" in body
                or "STALL_DUMP_SECS" in body), line
    # The header: r1's release lines, and the gate's verdict (reasons grouped by fix: r1's
    # --config=prod fixes merge into r2's, so the count of fixes and their numbers move).
    header_changes = [l for l in diff if l[1:].startswith("#")]
    assert header_changes and all("glm53_v2" in l or "glm53_v3" in l or old_short in l
                                  or new_short in l or "NOT DEPLOYABLE (" in l
                                  for l in header_changes)
