"""nginx: a real `nginx -t` on the embedded configs, streaming keepalive."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from deploy.validators.tests.harness import Inputs, replace_once, run_validator

NGINX = "nginx"


def nginx_config_name(doc: dict[str, Any]) -> str:
    """The config the public nginx service mounts (the generator may name it anything)."""
    [name] = [c["source"] if isinstance(c, dict) else c for c in doc["services"][NGINX]["configs"]]
    return name


def edit_nginx(doc: dict[str, Any], edit) -> None:
    name = nginx_config_name(doc)
    doc["configs"][name]["content"] = edit(doc["configs"][name]["content"])


def drop_line(text: str, needle: str) -> str:
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if needle in line]
    assert len(hits) == 1, f"{needle!r} on {len(hits)} lines"
    return "\n".join(lines[:hits[0]] + lines[hits[0] + 1:])


def line_of(text: str, needle: str) -> int:
    [number] = [i for i, line in enumerate(text.split("\n"), 1) if needle in line]
    return number


def tls_server_line(text: str) -> int:
    """Line of the `server {` that holds the public TLS listener (`listen 443 ssl…`)."""
    lines = text.split("\n")
    listen = next(i for i, l in enumerate(lines) if re.search(r"listen\s+(\S+:)?443\s.*ssl", l))
    return max(i for i in range(listen) if re.match(r"\s*server\s*\{", lines[i])) + 1


def nginx(inputs: Inputs, *files: Path):
    return run_validator("nginx_check", "--nginx-bin", inputs.nginx_bin, *files)


def test_committed_files_pass(inputs: Inputs) -> None:
    result = nginx(inputs, *inputs.all_files)
    assert result.returncode == 0, result.output
    assert result.stdout.count("nginx: OK") == len(inputs.all_files)


def test_nginx_t_rejects_unknown_directive(inputs: Inputs, mutate) -> None:
    holder: dict[str, Any] = {}

    def drift(doc: dict[str, Any]) -> None:
        def edit(text: str) -> str:
            text = replace_once(text, "proxy_buffering off;", "proxy_bufering off;",
                                count=text.count("proxy_buffering off;"))
            holder["line"] = min(i for i, l in enumerate(text.split("\n"), 1) if "proxy_bufering" in l)
            return text
        holder["name"] = nginx_config_name(doc)
        edit_nginx(doc, edit)

    copy = mutate(inputs.long_context, drift)
    result = nginx(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: configs.{holder['name']}.content: nginx -t: line {holder['line']}: [emerg] "
        'unknown directive "proxy_bufering"']


def test_unescaped_dollar_breaks_nginx(inputs: Inputs, mutate) -> None:
    """`$host` instead of `$$host`: Compose interpolates it to "" and nginx -t fails."""
    holder: dict[str, str] = {}

    def drift(doc: dict[str, Any]) -> None:
        def edit(text: str) -> str:
            holder["line"] = str(line_of(text, "proxy_set_header Host $$host;"))
            return replace_once(text, "proxy_set_header Host $$host;", "proxy_set_header Host $host;")
        holder["name"] = nginx_config_name(doc)
        edit_nginx(doc, edit)

    copy = mutate(inputs.long_context, drift)
    result = nginx(inputs, copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: configs.{holder['name']}.content: nginx -t: line {holder['line']}: [emerg] "
        'invalid number of arguments in "proxy_set_header" directive']


def test_http2_server_without_keepalive_requests(inputs: Inputs, mutate) -> None:
    holder: dict[str, Any] = {}

    def drift(doc: dict[str, Any]) -> None:
        def edit(text: str) -> str:
            text = drop_line(text, "keepalive_requests")
            holder["line"] = tls_server_line(text)
            return text
        holder["name"] = nginx_config_name(doc)
        edit_nginx(doc, edit)

    copy = mutate(inputs.long_context, drift)
    result = nginx(inputs, copy)
    assert result.returncode == 1
    [error] = result.errors()
    assert error.startswith(f"{copy}: configs.{holder['name']}.content: server block at line "
                            f"{holder['line']} (listen ")
    assert error.endswith(
        "serves HTTP/2 in front of proxy-glm53 but lacks keepalive_requests in server scope; long "
        "streams are closed by the defaults (set e.g. `keepalive_timeout 1h; "
        "keepalive_requests 1000000;`)")


def test_unbalanced_braces(inputs: Inputs, mutate) -> None:
    holder: dict[str, Any] = {}

    def drift(doc: dict[str, Any]) -> None:
        def edit(text: str) -> str:
            return text.rstrip().rstrip("}") + "\n"
        holder["name"] = nginx_config_name(doc)
        edit_nginx(doc, edit)

    copy = mutate(inputs.long_context, drift)
    result = nginx(inputs, copy)
    assert result.returncode == 1
    [error] = result.errors()
    assert error.startswith(f"{copy}: configs.{holder['name']}.content: nginx syntax: line ")
    assert error.endswith("unbalanced '{': block never closed (braces and `;` must balance)")
