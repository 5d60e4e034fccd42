"""Applies one parsed file section to bytes: exact context, declared offsets only, no fuzz."""

from __future__ import annotations

from collections.abc import Mapping

from .diffparse import FilePatch, Hunk, _split_lines
from .errors import (
    DiffSyntaxError,
    HunkMismatchError,
    HunkOffsetError,
    LineEndingError,
    Where,
)


def _show(line: bytes) -> str:
    text = repr(line.decode("utf-8", errors="replace"))
    return text if len(text) <= 100 else text[:97] + "..."


def _matches(lines: list[bytes], pos: int, hunk: Hunk) -> bool:
    n = len(hunk.old_lines)
    return 0 <= pos and pos + n <= len(lines) and tuple(lines[pos:pos + n]) == hunk.old_lines


def apply_delta(source: bytes, delta: bytes, where: Where) -> bytes:
    """git's binary delta: a varint source size, a varint result size, then copy/insert ops."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = delta[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    try:
        if varint() != len(source):
            raise DiffSyntaxError("binary delta was made against another version of the file", where)
        size = varint()
        out = bytearray()
        while pos < len(delta):
            op = delta[pos]
            pos += 1
            if op & 0x80:
                offset = length = 0
                for k in range(4):
                    if op & (1 << k):
                        offset |= delta[pos] << (8 * k)
                        pos += 1
                for k in range(3):
                    if op & (0x10 << k):
                        length |= delta[pos] << (8 * k)
                        pos += 1
                length = length or 0x10000
                if offset + length > len(source):
                    raise IndexError("copy beyond the source")
                out += source[offset:offset + length]
            elif op:
                out += delta[pos:pos + op]
                pos += op
            else:
                raise IndexError("opcode 0")
    except IndexError as e:
        raise DiffSyntaxError(f"binary delta is corrupt ({e})", where) from e
    if len(out) != size:
        raise DiffSyntaxError("binary delta produced the wrong size", where)
    return bytes(out)


def apply_file(
    content: bytes | None,
    fp: FilePatch,
    offsets: Mapping[int, int],
    patch_name: str,
    fix_hint: str,
) -> bytes | None:
    """Returns the new bytes of the file (None if the section deletes it).

    `content` is the file as the previous patches left it (None: absent). `offsets` maps a hunk
    number to the line offset the declaration expects for it (0 when absent).
    """
    path = fp.path
    if fp.binary:
        if fp.binary_data is None:
            raise DiffSyntaxError(
                "binary patch without data ('Binary files ... differ')",
                Where(patch=patch_name, file=path, fix="regenerate it with `git diff --binary`"),
            )
        if fp.binary_data.kind == "literal":
            return fp.binary_data.data if fp.new_path is not None else None
        return apply_delta(content or b"", fp.binary_data.data, Where(patch=patch_name, file=path))

    if fp.crlf and (content is None or b"\r\n" not in content):
        hunk = next((h for h in fp.hunks if h.crlf), None)
        raise LineEndingError(
            "the patch has CRLF line endings but the source file uses LF",
            Where(
                patch=patch_name,
                hunk=hunk.label() if hunk else "the file header lines",
                file=path,
                expected="LF line endings (as in the source)",
                actual="CR LF line endings in the patch",
                fix=f"convert the patch to LF (`sed -i 's/\\r$//' patches/{patch_name}`; check your editor's "
                f"or git's autocrlf setting), then {fix_hint}",
            ),
        )

    lines = _split_lines(content) if content else []
    out: list[bytes] = []
    cursor = 0
    for hunk in fp.hunks:
        declared = offsets.get(hunk.index, 0)
        want = hunk.old_pos + declared
        if want >= cursor and _matches(lines, want, hunk):
            out.extend(lines[cursor:want])
            out.extend(hunk.new_lines)
            cursor = want + len(hunk.old_lines)
            continue
        found = [q for q in range(cursor, len(lines) - len(hunk.old_lines) + 1) if _matches(lines, q, hunk)]
        where = Where(patch=patch_name, hunk=hunk.label(), file=path)
        if found:
            actual = found[0] - hunk.old_pos
            where.expected = f"the hunk at line {want + 1} (offset {declared:+d})"
            where.actual = f"it matches only at line {found[0] + 1} (offset {actual:+d})"
            where.fix = (
                "regenerate the patch against the tree the previous patches leave, or, if this "
                f"offset is deliberate (a byte-identical upstream patch), declare \"offsets\": "
                f"{{\"{hunk.index}\": {actual}}} on this file's entry; then {fix_hint}"
            )
            raise HunkOffsetError("hunk applies only at an offset the declaration does not expect", where)
        where.fix = f"the context must match exactly (no fuzz): regenerate the patch against the tree the previous patches leave; then {fix_hint}"
        for k, expected_line in enumerate(hunk.old_lines):
            got = lines[want + k] if 0 <= want + k < len(lines) else None
            if got != expected_line:
                where.expected = f"line {want + k + 1}: {_show(expected_line)}"
                where.actual = f"line {want + k + 1}: " + ("<end of file>" if got is None else _show(got))
                break
        raise HunkMismatchError("hunk context does not match the file (it would need fuzz)", where)
    out.extend(lines[cursor:])
    result = b"".join(out)
    if fp.new_path is None:
        if result:
            raise HunkMismatchError(
                "the patch deletes the file but its hunks leave lines behind",
                Where(patch=patch_name, file=path, fix=f"regenerate the patch; then {fix_hint}"),
            )
        return None
    return result
