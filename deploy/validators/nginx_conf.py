"""A small nginx configuration parser: directives with arguments, blocks and source spans.

Enough of nginx's own tokenizer (ngx_conf_read_token) to reason about server blocks: quotes with
escapes, `#` comments, `${var}` inside words, `;`, `{`, `}`. Each argument keeps its character
span so the config can be rewritten for `nginx -t` without moving any line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator


class NginxSyntaxError(Exception):
    """Unbalanced braces, an unterminated quote, or a directive without `;`."""

    def __init__(self, message: str, line: int):
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class Token:
    text: str  # unquoted value
    start: int  # span in the source, quotes included
    end: int
    line: int
    quoted: bool = False


@dataclass
class Directive:
    name: str
    args: list[Token]
    line: int
    block: list["Directive"] | None = None
    name_token: Token | None = None
    end: int = 0  # just past the terminating `;` (or the opening `{`)
    parent: "Directive | None" = field(default=None, repr=False)

    @property
    def values(self) -> list[str]:
        return [a.text for a in self.args]

    def children(self, name: str) -> list["Directive"]:
        return [d for d in self.block or [] if d.name == name]

    def walk(self) -> Iterator["Directive"]:
        for d in self.block or []:
            yield d
            yield from d.walk()


def _tokens(text: str) -> Iterator[Token]:
    i, line, n = 0, 1, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch.isspace():
            i += 1
        elif ch == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif ch in ";{}":
            yield Token(ch, i, i + 1, line)
            i += 1
        elif ch in "\"'":
            start, start_line, value = i, line, []
            i += 1
            while True:
                if i >= n:
                    raise NginxSyntaxError("unterminated quoted string", start_line)
                c = text[i]
                if c == "\\" and i + 1 < n:
                    value.append(text[i + 1] if text[i + 1] in "\"'\\" else text[i:i + 2])
                    i += 2
                    continue
                if c == ch:
                    i += 1
                    break
                if c == "\n":
                    line += 1
                value.append(c)
                i += 1
            yield Token("".join(value), start, i, start_line, quoted=True)
        else:
            start = i
            while i < n:
                c = text[i]
                if c.isspace() or c in ";":
                    break
                if c == "{":
                    # `${name}` is a variable, any other `{` ends the word and opens a block.
                    if i > start and text[i - 1] == "$":
                        close = text.find("}", i)
                        i = close + 1 if close != -1 else n
                        continue
                    break
                if c == "}":
                    break
                if c == "\\" and i + 1 < n:
                    i += 2
                    continue
                i += 1
            yield Token(text[start:i], start, i, line)


def parse(text: str) -> list[Directive]:
    """Top-level directives of a config; raises NginxSyntaxError on structural errors."""
    root: list[Directive] = []
    stack: list[tuple[list[Directive], Directive | None, int]] = [(root, None, 0)]
    pending: list[Token] = []
    for tok in _tokens(text):
        if tok.quoted or tok.text not in ";{}":
            pending.append(tok)
            continue
        current, parent, _ = stack[-1]
        if tok.text == "}":
            if pending:
                raise NginxSyntaxError(f"directive {pending[0].text!r} is missing ';'", pending[0].line)
            if len(stack) == 1:
                raise NginxSyntaxError("unexpected '}'", tok.line)
            stack.pop()
            continue
        if not pending:
            raise NginxSyntaxError(f"unexpected {tok.text!r}", tok.line)
        directive = Directive(pending[0].text, pending[1:], pending[0].line, parent=parent,
                              name_token=pending[0], end=tok.end)
        current.append(directive)
        pending = []
        if tok.text == "{":
            directive.block = []
            stack.append((directive.block, directive, tok.line))
    if pending:
        raise NginxSyntaxError(f"directive {pending[0].text!r} is missing ';'", pending[0].line)
    if len(stack) > 1:
        raise NginxSyntaxError("unbalanced '{': block never closed", stack[-1][2])
    return root


def walk(directives: list[Directive]) -> Iterator[Directive]:
    for d in directives:
        yield d
        yield from d.walk()


def servers(directives: list[Directive]) -> list[Directive]:
    """Every `server` block (inside `http` or at include level), excluding `upstream` members."""
    return [d for d in walk(directives) if d.name == "server" and d.block is not None]
