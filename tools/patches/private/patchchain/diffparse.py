"""Strict parser for git-style unified diffs, byte-exact (line endings are kept).

Anything the applier cannot apply exactly is rejected here with the patch line that is wrong:
quoted paths, missing a/ b/ prefixes, empty hunk lines (an editor stripped a space), hunk
bodies that disagree with their @@ counts, and hunk headers whose start lines disagree.
"""

from __future__ import annotations

import base64
import re
import zlib
from dataclasses import dataclass

from .errors import DiffSyntaxError, Where
from .layout import check_manifest_path

_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_GIT_EXTENDED = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
)
_REGEN = "regenerate the patch from real trees with `git diff` (or `diff -u`); never edit hunks by hand"


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based within its file section
    header: str  # the @@ line, for messages
    line_no: int  # line of the @@ header in the patch file
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    old_lines: tuple[bytes, ...]  # exact bytes, line endings included
    new_lines: tuple[bytes, ...]
    crlf: bool  # some body line ends in CR LF

    @property
    def old_pos(self) -> int:
        """0-based index of the first old line (for an empty old side: the insertion point)."""
        return self.old_start - 1 if self.old_len else self.old_start

    @property
    def new_pos(self) -> int:
        return self.new_start - 1 if self.new_len else self.new_start

    def label(self) -> str:
        return f"#{self.index} {self.header} (patch line {self.line_no})"


@dataclass(frozen=True)
class BinaryData:
    kind: str  # "literal" | "delta"
    size: int
    data: bytes  # inflated


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None: /dev/null (new file)
    new_path: str | None  # None: /dev/null (deleted file)
    line_no: int
    hunks: tuple[Hunk, ...]
    binary: bool
    binary_data: BinaryData | None  # None for "Binary files ... differ" (no content)
    old_mode: str | None
    new_mode: str | None
    copy: bool
    crlf_header: bool

    @property
    def path(self) -> str:
        """The path the declaration lists this change under (the new path, or the deleted one)."""
        return self.new_path if self.new_path is not None else self.old_path  # type: ignore[return-value]

    @property
    def op(self) -> str:
        if self.old_path is None:
            return "create"
        if self.new_path is None:
            return "delete"
        if self.old_path != self.new_path:
            return "rename"
        return "modify"

    @property
    def crlf(self) -> bool:
        return self.crlf_header or any(h.crlf for h in self.hunks)


@dataclass(frozen=True)
class ParsedPatch:
    name: str
    header: bytes  # free text before the first file section
    files: tuple[FilePatch, ...]


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _text(line: bytes) -> str:
    return line.rstrip(b"\r\n").decode("utf-8", errors="replace")


class _Parser:
    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        self.lines = _split_lines(data)
        self.i = 0

    def fail(self, summary: str, line_no: int | None = None, fix: str = _REGEN, **kw: str) -> DiffSyntaxError:
        n = self.i + 1 if line_no is None else line_no
        text = _text(self.lines[n - 1]) if 0 < n <= len(self.lines) else "<end of file>"
        where = Where(patch=self.name, fix=fix, **kw)
        where.details.append(f"line {n}: {text!r}")
        return DiffSyntaxError(summary, where)

    def at(self, prefix: bytes, k: int = 0) -> bool:
        j = self.i + k
        return j < len(self.lines) and self.lines[j].startswith(prefix)

    def at_file_start(self) -> bool:
        return self.at(b"diff --git ") or (self.at(b"--- ") and self.at(b"+++ ", 1))

    def parse(self) -> ParsedPatch:
        while self.i < len(self.lines) and not self.at_file_start():
            self.i += 1
        header = b"".join(self.lines[: self.i])
        if self.i == len(self.lines):
            raise self.fail("patch holds no file changes (no `diff --git` or `---`/`+++` lines)", 1)
        files = []
        while self.i < len(self.lines):
            if not self.at_file_start():
                raise self.fail("unexpected line between file changes")
            files.append(self._file())
        seen: dict[str, int] = {}
        for fp in files:
            for p in {fp.old_path, fp.new_path} - {None}:
                if p in seen:
                    raise self.fail(
                        f"the patch changes {p} in two sections; one section per file",
                        fp.line_no,
                        file=p,
                    )
                seen[p] = fp.line_no
        return ParsedPatch(self.name, header, tuple(files))

    def _path(self, raw: str, prefix: str, line_no: int) -> str | None:
        path = raw.split("\t", 1)[0]
        if path == "/dev/null":
            return None
        if path.startswith('"'):
            raise self.fail("quoted paths (special characters) are not supported", line_no)
        if path.startswith(prefix):
            path = path[len(prefix):]
        elif not path.startswith("/"):
            raise self.fail(
                f"paths must carry git's {prefix!r} prefix (patches apply with -p1)", line_no
            )
        return check_manifest_path(path, Where(patch=self.name, details=[f"patch line {line_no}"]))

    def _file(self) -> FilePatch:
        start = self.i + 1
        crlf = False
        ext: dict[str, str] = {}
        git_paths: tuple[str | None, str | None] = (None, None)
        if self.at(b"diff --git "):
            crlf |= self.lines[self.i].endswith(b"\r\n")
            rest = _text(self.lines[self.i])[len("diff --git "):]
            n = (len(rest) - 5) // 2
            if n > 0 and rest == f"a/{rest[2:2 + n]} b/{rest[2:2 + n]}":
                p = self._path("a/" + rest[2:2 + n], "a/", self.i + 1)
                git_paths = (p, p)
            self.i += 1
            while self.i < len(self.lines) and not (
                self.at(b"--- ") or self.at(b"@@") or self.at(b"diff --git ")
                or self.at(b"GIT binary patch") or self.at(b"Binary files ")
            ):
                line = _text(self.lines[self.i])
                crlf |= self.lines[self.i].endswith(b"\r\n")
                key = next((k for k in _GIT_EXTENDED if line.startswith(k)), None)
                if key is None:
                    raise self.fail("unknown line in a git extended header")
                ext[key.strip()] = line[len(key):]
                self.i += 1
        old_path, new_path = git_paths
        if "rename from" in ext or "copy from" in ext:
            src = ext.get("rename from", ext.get("copy from", ""))
            dst = ext.get("rename to", ext.get("copy to", ""))
            old_path = check_manifest_path(src, Where(patch=self.name, details=[f"patch line {start}"]))
            new_path = check_manifest_path(dst, Where(patch=self.name, details=[f"patch line {start}"]))
        if "new file mode" in ext:
            old_path = None
        if "deleted file mode" in ext:
            new_path = None
        hunks: list[Hunk] = []
        binary = False
        binary_data = None
        if self.at(b"--- "):
            crlf |= self.lines[self.i].endswith(b"\r\n") or self.lines[self.i + 1].endswith(b"\r\n")
            old_path = self._path(_text(self.lines[self.i])[4:], "a/", self.i + 1)
            new_path = self._path(_text(self.lines[self.i + 1])[4:], "b/", self.i + 2)
            self.i += 2
            if old_path is None and new_path is None:
                raise self.fail("both sides are /dev/null", start)
            while self.at(b"@@"):
                hunks.append(self._hunk(len(hunks) + 1, hunks[-1] if hunks else None, new_path or old_path or ""))
            if not hunks:
                raise self.fail("a `---`/`+++` pair without any hunk", self.i)
        elif self.at(b"GIT binary patch"):
            binary = True
            self.i += 1
            binary_data = self._binary()
        elif self.at(b"Binary files "):
            binary = True
            self.i += 1
        if old_path is None and new_path is None:
            raise self.fail("a file section that names no file", start)
        return FilePatch(
            old_path=old_path,
            new_path=new_path,
            line_no=start,
            hunks=tuple(hunks),
            binary=binary,
            binary_data=binary_data,
            old_mode=ext.get("old mode") or ext.get("deleted file mode"),
            new_mode=ext.get("new mode") or ext.get("new file mode"),
            copy="copy from" in ext,
            crlf_header=crlf,
        )

    def _hunk(self, index: int, previous: Hunk | None, path: str) -> Hunk:
        line_no = self.i + 1
        raw = self.lines[self.i]
        m = _HUNK_RE.match(raw.rstrip(b"\r\n"))
        if not m:
            raise self.fail("malformed hunk header", file=path)
        old_start, new_start = int(m.group(1)), int(m.group(3))
        old_len = int(m.group(2)) if m.group(2) is not None else 1
        new_len = int(m.group(4)) if m.group(4) is not None else 1
        header = _text(raw)
        header = header[: header.index("@@", 2) + 2]
        crlf = raw.endswith(b"\r\n")
        self.i += 1
        old: list[bytes] = []
        new: list[bytes] = []
        old_left, new_left = old_len, new_len
        while old_left or new_left:
            if self.i >= len(self.lines):
                raise self.fail(
                    f"hunk #{index} ends early: {old_left} old and {new_left} new lines missing",
                    file=path,
                )
            line = self.lines[self.i]
            if line in (b"\n", b"\r\n"):
                raise self.fail(
                    f"hunk #{index} has an empty line; context lines start with a space "
                    "(an editor probably stripped trailing whitespace)",
                    file=path,
                )
            if not line.endswith(b"\n"):
                raise self.fail(f"hunk #{index}: the patch file ends without a newline", file=path)
            tag, body = line[:1], line[1:]
            crlf |= body.endswith(b"\r\n")
            if tag == b" ":
                old.append(body)
                new.append(body)
                old_left -= 1
                new_left -= 1
            elif tag == b"-":
                old.append(body)
                old_left -= 1
            elif tag == b"+":
                new.append(body)
                new_left -= 1
            else:
                raise self.fail(f"hunk #{index}: a body line must start with ' ', '-' or '+'", file=path)
            if old_left < 0 or new_left < 0:
                raise self.fail(
                    f"hunk #{index} has more lines than its header {header!r} counts", file=path
                )
            self.i += 1
            if self.at(b"\\"):
                # "\ No newline at end of file": the line above has no final newline.
                if tag in (b" ", b"-"):
                    old[-1] = old[-1][:-1]
                if tag in (b" ", b"+"):
                    new[-1] = new[-1][:-1]
                self.i += 1
        hunk = Hunk(index, header, line_no, old_start, old_len, new_start, new_len,
                    tuple(old), tuple(new), crlf)
        if previous is not None and hunk.old_pos < previous.old_pos + previous.old_len:
            raise self.fail(f"hunk #{index} overlaps or precedes hunk #{index - 1}", line_no, file=path)
        delta = 0 if previous is None else (previous.new_pos + previous.new_len) - (previous.old_pos + previous.old_len)
        if hunk.new_pos != hunk.old_pos + delta:
            raise self.fail(
                f"hunk #{index} header says the new side starts at line {new_start}, but the hunks "
                f"before it put it at line {hunk.old_pos + delta + (1 if new_len else 0)} "
                "(hand-edited line numbers?)",
                line_no,
                file=path,
            )
        return hunk

    def _binary(self) -> BinaryData | None:
        forward: BinaryData | None = None
        for block in range(2):  # forward data, then the optional reverse data
            if self.i >= len(self.lines):
                break
            head = _text(self.lines[self.i])
            m = re.fullmatch(r"(literal|delta) (\d+)", head)
            if not m:
                if block == 0:
                    raise self.fail("`GIT binary patch` must be followed by `literal N` or `delta N`")
                break
            self.i += 1
            encoded = bytearray()
            while self.i < len(self.lines) and self.lines[self.i] not in (b"\n", b"\r\n"):
                line = _text(self.lines[self.i])
                c = line[:1]
                if "A" <= c <= "Z":
                    size = ord(c) - ord("A") + 1
                elif "a" <= c <= "z":
                    size = ord(c) - ord("a") + 27
                else:
                    raise self.fail("bad length character in binary patch data")
                try:
                    encoded += base64.b85decode(line[1:])[:size]
                except ValueError as e:
                    raise self.fail(f"bad base85 in binary patch data: {e}") from e
                self.i += 1
            self.i += 1  # the blank line closing the block
            try:
                data = zlib.decompress(bytes(encoded))
            except zlib.error as e:
                raise self.fail(f"binary patch data does not inflate: {e}") from e
            if len(data) != int(m.group(2)):
                raise self.fail("binary patch data has the wrong inflated size")
            if block == 0:
                forward = BinaryData(m.group(1), int(m.group(2)), data)
        return forward


def parse_patch(name: str, data: bytes) -> ParsedPatch:
    """Parses `data` (the whole patch file); `name` is used in messages."""
    return _Parser(name, data).parse()
