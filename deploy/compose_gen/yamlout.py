"""YAML building blocks and emission: anchors, merge keys, `$$` escaping, safe quoting.

Compose interpolates `${VAR}` in every string of the file, config contents included. Text that
is meant for a shell, nginx or the collector goes through `raw()`/`block()`, which double every
`$` so compose hands it over unchanged; env interpolations are written as plain strings.
"""

from __future__ import annotations

import io
import re
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.mergevalue import MergeValue
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import LiteralScalarString

# Plain scalars a YAML 1.1 reader (PyYAML, Ruby's Psych) would not read back as strings:
# booleans, null, numbers incl. sexagesimal (8000:8000), timestamps. Emitted double-quoted.
_YAML11_NON_STR = re.compile(r"""^(?:
    y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF
  | ~|null|Null|NULL|
  | [-+]?(?:0b[01_]+|0[0-7_]+|(?:0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+|[1-9][0-9_]*(?::[0-5]?[0-9])+)
  | [-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
  | [-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)
  | [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}.*
  | [-+]?[0-9][0-9_]*(?::[0-9]+)+
)$""", re.X)


def escape_dollars(text: str) -> str:
    """Makes `text` pass through compose interpolation unchanged."""
    return text.replace("$", "$$")


def raw(text: str) -> str:
    """A string compose must not interpolate (shell, nginx, collector syntax).

    Multi-line text becomes a literal block so scripts stay readable in the file.
    """
    if "\n" in text.rstrip("\n"):
        return block(text)
    return escape_dollars(text)


def block(text: str) -> LiteralScalarString:
    """Multi-line content (scripts, configs) as a literal block, `$`-escaped for compose."""
    if not text.endswith("\n"):
        text += "\n"
    if any(line != line.rstrip() for line in text.splitlines()):
        raise ValueError("block content has trailing whitespace; a literal block cannot keep it")
    return LiteralScalarString(escape_dollars(text))


def cmap(*pairs: tuple[str, Any], **kwargs: Any) -> CommentedMap:
    """An ordered mapping; positional pairs first, then keyword items."""
    m = CommentedMap()
    for k, v in pairs:
        m[k] = v
    for k, v in kwargs.items():
        m[k] = v
    return m


def seq(items: Iterable[Any], flow: bool = False) -> CommentedSeq:
    s = CommentedSeq(items)
    if flow:
        s.fa.set_flow_style()
    return s


def anchored(name: str, mapping: CommentedMap) -> CommentedMap:
    mapping.yaml_set_anchor(name, always_dump=True)
    return mapping


def merged(base: CommentedMap, own: CommentedMap) -> CommentedMap:
    """`own` with `<<: *base` first; own keys override. Own keys must be set before merging."""
    value = MergeValue()
    value.append(base)
    value.merge_pos = 0
    own.add_yaml_merge(value)
    return own


class _Representer(RoundTripRepresenter):
    pass


def _represent_str(rep: RoundTripRepresenter, data: str) -> Any:
    if _YAML11_NON_STR.match(data) or data != data.strip() or "\n" in data:
        return rep.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    return RoundTripRepresenter.represent_str(rep, data)


_Representer.add_representer(str, _represent_str)


def _yaml() -> YAML:
    yaml = YAML()
    yaml.Representer = _Representer
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096  # never fold long strings
    return yaml


def dump_plain(data: Any) -> str:
    """Plain dicts/lists as block YAML, in insertion order, with the same safe quoting."""
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


def dump_body(document: CommentedMap) -> str:
    """The compose document without a header."""
    out = io.StringIO()
    _yaml().dump(document, out)
    return out.getvalue()


def with_header(header: str, body: str) -> str:
    """`body` with `header` as a leading comment block."""
    lines = [("# " + line).rstrip() for line in header.rstrip("\n").split("\n")]
    return "\n".join(lines) + "\n" + body
