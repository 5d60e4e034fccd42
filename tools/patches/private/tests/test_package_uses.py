"""The bump check's lookup of a shipped package's SGLang names on a candidate tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.patches.private.patchchain.errors import DeclarationError
from tools.patches.private.patchchain.layout import SourceTree
from tools.patches.private.patchchain.package_uses import HOOKS, MISSING, UPSTREAM, NameUse, check_uses, load_uses, top_level_names

SUPPORT = '''
USES = {"1.0": {"sglang.srt.mod": ("kept", "Added", "gone"), "sglang.srt.pkg": ("inner",)}}
USES["1.1"] = USES["1.0"]
'''

HOOK = b"""diff --git a/python/sglang/srt/mod.py b/python/sglang/srt/mod.py
--- a/python/sglang/srt/mod.py
+++ b/python/sglang/srt/mod.py
@@ -1,2 +1,5 @@
 def kept():
     pass
+
+class Added:
+    pass
"""


def _tree(tmp_path: Path) -> SourceTree:
    srt = tmp_path / "sglang" / "srt"
    (srt / "pkg").mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (srt / "mod.py").write_text("def kept():\n    pass\n")
    (srt / "pkg" / "__init__.py").write_text("try:\n    from x import inner\nexcept ImportError:\n    inner = None\n")
    tree = SourceTree(tmp_path, "package")
    tree.check_root()
    return tree


def test_each_name_is_upstream_added_by_a_hook_or_missing(tmp_path: Path):
    support = tmp_path / "sglang_support.py"
    support.write_text(SUPPORT)
    uses = load_uses(support, "1.0")
    assert check_uses(uses, _tree(tmp_path / "tree"), {"v9/hook.diff": HOOK}) == [
        NameUse("sglang.srt.mod", "kept", UPSTREAM),
        NameUse("sglang.srt.mod", "Added", HOOKS, "v9/hook.diff"),
        NameUse("sglang.srt.mod", "gone", MISSING),
        NameUse("sglang.srt.pkg", "inner", UPSTREAM),  # a package's __init__, bound in a try block
    ]


def test_a_release_without_a_row_or_an_unreadable_table_names_the_file_and_the_fix(tmp_path: Path):
    support = tmp_path / "sglang_support.py"
    support.write_text(SUPPORT)
    with pytest.raises(DeclarationError, match=r"USES has no row for SGLang 2\.0 \(rows: 1\.0, 1\.1\)"):
        load_uses(support, "2.0")
    support.write_text("import sglang\n")
    with pytest.raises(DeclarationError, match="cannot read its USES table"):
        load_uses(support, "1.0")


def test_top_level_names_ignore_what_functions_bind():
    names = top_level_names(b"import a.b\nfrom c import d as e\nX: int = 1\nif 1:\n    Y = 2\n"
                            b"def f():\n    Z = 3\n")
    assert names == {"a", "e", "X", "Y", "f"}


def test_the_applier_digest_covers_what_applies_and_not_the_bump_check():
    """PROVENANCE's applier.sources_sha256 names the code that applied the chain: a change to
    the bump check (this module's code among it) or to rehash must not change every image."""
    from tools.patches.private.patchchain import provenance

    names = {module.name for module in provenance.applier_modules()}
    assert {"apply_main.py", "apply.py", "chain.py", "diffparse.py", "provenance.py", "wheel.py"} <= names
    assert not names & {"bump.py", "bump_main.py", "package_uses.py", "rehash_main.py"}
