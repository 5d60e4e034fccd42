"""Service contracts: dependency direction, registrar auth, proxy env, digest pinning."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deploy.validators.glm53_contract import W4AFP8_LONG_CONTEXT
from deploy.validators import services as services_validator
from deploy.validators.tests.harness import Inputs, load, run_in_process

R1 = W4AFP8_LONG_CONTEXT.replicas[0].name
PROXY = W4AFP8_LONG_CONTEXT.proxy
REGISTRAR = "model-proxy-registrar"


def services(*files: Path):
    # In this process: one case is one short run (test_loading.py runs the CLI's own entry).
    return run_in_process(services_validator.main, *files)


def registrar_config(doc: dict[str, Any]) -> str:
    [source] = [c["source"] if isinstance(c, dict) else c
                for c in doc["services"][REGISTRAR]["configs"]]
    return source


def test_committed_files_pass(inputs: Inputs) -> None:
    result = services(*inputs.all_files)
    assert result.returncode == 0, result.output


def test_engine_digest_replaced_by_tag(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        image = doc["services"][R1]["image"]
        doc["services"][R1]["image"] = image.split("@")[0] + ":glm53-v2"

    copy = mutate(inputs.long_context, drift)
    result = services(copy)
    assert result.returncode == 1
    repo = re.sub(r"@sha256:.*", "", load(inputs.long_context)["services"][R1]["image"])
    assert result.errors() == [
        f"{copy}: services.{R1}.image: image '{repo}:glm53-v2' is not pinned by digest: use "
        "<repository>@sha256:<64 hex> (a tag can move under a running deployment)"]


def test_tag_beside_the_digest_is_pinned(inputs: Inputs, mutate) -> None:
    """A reference may carry a tag and a digest; the digest pins it (tools/oci/reference.py)."""
    def drift(doc: dict[str, Any]) -> None:
        repo, digest = doc["services"][R1]["image"].split("@")
        doc["services"][R1]["image"] = f"{repo}:glm53-v3@{digest}"

    result = services(mutate(inputs.long_context, drift))
    assert result.returncode == 0, result.output


@pytest.mark.parametrize("shape,says", [
    ("{path}@{digest}", "is not a registry host"),                  # no host: docker.io implied
    ("{repo}:a:b@{digest}", "no tag or digest"),                     # two tags
    ("{repo}@{digest}@{digest}", "is not sha256:<64 lowercase hex>"),  # two digests
])
def test_malformed_references_are_refused(inputs: Inputs, mutate, shape: str, says: str) -> None:
    def drift(doc: dict[str, Any]) -> None:
        repo, digest = doc["services"][R1]["image"].split("@")
        doc["services"][R1]["image"] = shape.format(repo=repo, path=repo.split("/", 1)[1], digest=digest)

    copy = mutate(inputs.long_context, drift)
    result = services(copy)
    assert result.returncode == 1
    [error] = result.errors()
    assert error.startswith(f"{copy}: services.{R1}.image: image ") and says in error, error


def test_proxy_depends_on_engine(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][PROXY]["depends_on"] = [R1]

    copy = mutate(inputs.long_context, drift)
    result = services(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{PROXY}.depends_on: inference proxy depends on engine {R1}: remove it "
        "(the proxy health-checks its backends; a dependency would restart the proxy with one "
        "replica)"]


def test_nginx_does_not_depend_on_its_proxy(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        del doc["services"]["nginx"]["depends_on"]

    copy = mutate(inputs.long_context, drift)
    result = services(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.nginx.depends_on: nginx routes to inference proxy {PROXY} but does not "
        f"depend on it: add `{PROXY}` to depends_on"]


def _probe_line(text: str) -> int:
    lines = text.replace("\\\n", " ").splitlines()
    [i] = [i for i, l in enumerate(lines) if "curl" in l and "/v1/chat/completions" in l]
    return i + 1


def _edit_probe_header(mutate, inputs: Inputs, header: str) -> tuple[Path, str, int]:
    """The chat-completion probe's own `-H "@$$INFERENCE_AUTH" ` replaced by `header`."""
    holder: dict[str, Any] = {}

    def drift(doc: dict[str, Any]) -> None:
        name = registrar_config(doc)
        text = doc["configs"][name]["content"]
        probe = text.index("/v1/chat/completions")
        cut = text.rindex('-H "@$$INFERENCE_AUTH" ', 0, probe)
        text = text[:cut] + header + text[cut + len('-H "@$$INFERENCE_AUTH" '):]
        holder.update(name=name, line=_probe_line(text))
        doc["configs"][name]["content"] = text

    copy = mutate(inputs.long_context, drift)
    return copy, holder["name"], holder["line"]


def test_registrar_probe_without_bearer(inputs: Inputs, mutate) -> None:
    copy, name, line = _edit_probe_header(mutate, inputs, "")
    result = services(copy)
    assert result.returncode == 1
    [error] = result.errors()
    assert error.startswith(
        f"{copy}: configs.{name}.content: line {line}: curl probe of the inference API without "
        "a bearer token (add `-H \"@$$INFERENCE_AUTH\"`, a file written with `printf "
        "'Authorization: Bearer %s\\n' \"$$PROXY_TOKEN\"`): ")


def test_registrar_token_in_curl_argv(inputs: Inputs, mutate) -> None:
    """The old form: authenticated, but the token is in curl's argv (/proc/<pid>/cmdline)."""
    copy, name, line = _edit_probe_header(mutate, inputs,
                                          '-H "Authorization: Bearer $${PROXY_TOKEN}" ')
    result = services(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: configs.{name}.content: token-argv: line {line}: curl takes $PROXY_TOKEN as an "
        "argument, readable by every user of the host in /proc/<pid>/cmdline; write it to a 0600 "
        "header file with the shell's builtin printf and pass `-H @FILE`"]


def test_registrar_token_not_from_host(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        doc["services"][REGISTRAR]["environment"]["PROXY_TOKEN"] = "hunter2"

    copy = mutate(inputs.long_context, drift)
    result = services(copy)
    leaked = "hunter2" in result.output  # checked first: a failure must not print the value
    assert not leaked, "the rejected literal token appears in the output (not shown)"
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{REGISTRAR}.environment.PROXY_TOKEN: registrar must take PROXY_TOKEN "
        "from the host: `PROXY_TOKEN: ${PROXY_TOKEN}` (found <a literal of 7 characters, not "
        "shown>)"]


def test_proxy_without_web_context_key(inputs: Inputs, mutate) -> None:
    def drift(doc: dict[str, Any]) -> None:
        del doc["services"][PROXY]["environment"]["WEB_CONTEXT_SEARCH_API_KEY"]

    copy = mutate(inputs.long_context, drift)
    result = services(copy)
    assert result.returncode == 1
    assert result.errors() == [
        f"{copy}: services.{PROXY}.environment.WEB_CONTEXT_SEARCH_API_KEY: inference proxy must "
        "pass WEB_CONTEXT_SEARCH_API_KEY (web context search); set `WEB_CONTEXT_SEARCH_API_KEY: "
        "${WEB_CONTEXT_SEARCH_API_KEY:?WEB_CONTEXT_SEARCH_API_KEY must be set}`"]
