"""The committed compose files through the deployability gate (deploy/deployable.py).

REQUIRE_DEPLOYABLE=1 (--config=release): every file must be deployable. Otherwise the reasons
are printed and the CLI must report them the way an operator sees them: one line per reason
with its fix, exit 1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy import deployable

FILES = [Path(p) for p in os.environ["COMPOSE_FILES"].split()]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_gate(path: Path, capsys) -> None:
    reasons = deployable.reasons(path)
    status = deployable.main([str(path)])
    lines = capsys.readouterr().out.splitlines()
    if os.environ.get("REQUIRE_DEPLOYABLE") == "1":
        assert not reasons, "not deployable:\n" + "\n".join(lines)
    assert status == (1 if reasons else 0)
    if reasons:
        # Every reason once, under the line of its fix.
        assert [l[6:] for l in lines if l.startswith("    - ")] == [
            r.message for g in deployable.grouped(reasons) for r in g.reasons]
        assert sorted(l[6:] for l in lines if l.startswith("    - ")) == sorted(r.message for r in reasons)
        assert [l.split(": ", 1)[1] for l in lines if l.startswith("  fix ")] == [
            g.fix for g in deployable.grouped(reasons)]
    # The header states the same verdict the gate reaches.
    head = path.read_text().split("\nx-", 1)[0]
    assert (f"NOT DEPLOYABLE ({len(reasons)} reasons" in head) if reasons else ("# Deployable" in head)
    print("\n".join(lines))
