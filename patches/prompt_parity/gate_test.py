"""The prompt-parity gate: the corpus' prompt ids on the candidate base vs the current base.

Both renders run in their base image (render_ids.py through tools/podman's run_in_image, no
network); compare.py judges them against the reviewed accepted file. The renders and a text
report land in TEST_UNDECLARED_OUTPUTS_DIR (bazel-testlogs/.../test.outputs/) for review.

Environment (set by the BUILD target): PARITY_CURRENT / PARITY_CANDIDATE (image_files JSON of
each base), PARITY_SRC (corpus.py, glm_tokenizer.py, render_ids.py), PARITY_ACCEPTED (the file)
and PARITY_ACCEPTED_DISPLAY (its repository path, for messages).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from patches.prompt_parity import accepted as accepted_file
from patches.prompt_parity import compare

SRC_IN_IMAGE = "/tmp/parity-src"
OUT_IN_IMAGE = "/tmp/parity-out"


def _image_args(image_files: Path) -> list[str]:
    data = json.loads(image_files.read_text())
    args = ["--layout", data["layout"]]
    for blob in data["blobs"]:
        args += ["--blob", blob]
    return args


def _render(image_files: Path, label: str, scratch: Path) -> dict:
    from tools.podman import run_in_image

    src, out = scratch / f"{label}-src", scratch / f"{label}-out"
    src.mkdir()
    out.mkdir()
    for name in os.environ["PARITY_SRC"].split():
        shutil.copyfile(name, src / Path(name).name)  # dereference runfiles symlinks
    code = run_in_image.main([
        "run", *_image_args(image_files),
        "--mount", f"{src}:{SRC_IN_IMAGE}", "--mount", f"{out}:{OUT_IN_IMAGE}:rw",
        "--env", "PYTHONDONTWRITEBYTECODE=1",
        "--", "python3", f"{SRC_IN_IMAGE}/render_ids.py", "--src", SRC_IN_IMAGE,
        "--out", f"{OUT_IN_IMAGE}/ids.json",
    ])
    result = out / "ids.json"
    assert code == 0 and result.is_file(), f"{label}: render_ids.py failed in {image_files} (exit {code}; see the log)"
    return json.loads(result.read_text())


def test_prompt_parity() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="prompt-parity.", dir=os.environ.get("TEST_TMPDIR")))
    accepted = accepted_file.load(Path(os.environ["PARITY_ACCEPTED"]), os.environ["PARITY_ACCEPTED_DISPLAY"])
    current = _render(Path(os.environ["PARITY_CURRENT"]), "current", scratch)
    candidate = _render(Path(os.environ["PARITY_CANDIDATE"]), "candidate", scratch)
    for label, render, version in (("current", current, accepted.current),
                                   ("candidate", candidate, accepted.candidate)):
        assert render["sglang"] == version, (
            f"{accepted.path} says {label} is SGLang {version}, the image has {render['sglang']}; "
            "fix the file's header or the target's images")
    verdict = compare.compare(current, candidate, accepted)
    lines = [verdict.summary(),
             f"current: sglang {current['sglang']} {current['packages']} {current['setup']}",
             f"candidate: sglang {candidate['sglang']} {candidate['packages']} {candidate['setup']}",
             *[f"differs: {d.describe()}" for d in verdict.differences],
             *[f"PROBLEM: {p}" for p in verdict.problems]]
    report = "\n".join(lines) + "\n"
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if outputs:
        for label, render in (("current", current), ("candidate", candidate)):
            Path(outputs, f"{label}.ids.json").write_text(json.dumps(render, indent=1, sort_keys=True))
        Path(outputs, "report.txt").write_text(report)
    print(report)
    assert verdict.ok, f"{len(verdict.problems)} prompt-parity problems:\n" + "\n".join(verdict.problems)
