"""Errors of the patch chain. Each names what to fix: patch, hunk, file, hashes, command."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Where:
    """The place an error is about; every field is optional and printed when set."""

    patch: str | None = None
    hunk: str | None = None
    file: str | None = None
    expected: str | None = None
    actual: str | None = None
    fix: str | None = None
    details: list[str] = field(default_factory=list)


class PatchChainError(Exception):
    """Base class: a one-line summary followed by the labelled facts and the fix."""

    def __init__(self, summary: str, where: Where | None = None) -> None:
        self.summary = summary
        self.where = where or Where()
        super().__init__(self._render())

    def _render(self) -> str:
        w = self.where
        lines = [self.summary]
        for label, value in (
            ("patch", w.patch),
            ("hunk", w.hunk),
            ("file", w.file),
            ("expected", w.expected),
            ("actual", w.actual),
        ):
            if value is not None:
                lines.append(f"  {label + ':':<10}{value}")
        lines.extend(f"  {d}" for d in w.details)
        if w.fix is not None:
            lines.append(f"  {'fix:':<10}{w.fix}")
        return "\n".join(lines)


class DeclarationError(PatchChainError):
    """A series declaration is malformed (names the declaration file and the key)."""


class PatchChecksumError(PatchChainError):
    """A patch file's bytes differ from the sha256 its declaration pins."""


class DiffSyntaxError(PatchChainError):
    """A patch is not a well-formed unified diff."""


class PathOutsideRootError(PatchChainError):
    """A patch names a path outside the SGLang source root."""


class UndeclaredOperationError(PatchChainError):
    """A patch renames, deletes or binary-patches a file without declaring it."""


class UndeclaredFileError(PatchChainError):
    """A patch touches a file its declaration does not list (or the reverse)."""


class BaseDriftError(PatchChainError):
    """A base file's sha256 differs from the before-hash the series expects."""


class PatchOrderError(PatchChainError):
    """A patch expects a tree that a later patch of the series produces."""


class LineEndingError(PatchChainError):
    """A patch carries CRLF line endings against LF sources."""


class HunkMismatchError(PatchChainError):
    """A hunk's context does not match the tree exactly (it would need fuzz)."""


class HunkOffsetError(PatchChainError):
    """A hunk matches only at an offset the declaration does not expect."""


class StepHashError(PatchChainError):
    """After a patch, a file's sha256 differs from the declared after-hash."""


class PinError(PatchChainError):
    """An identity-pinned file drifted or is touched by a patch."""


class CompileError(PatchChainError):
    """A patched Python file does not parse or compile."""
