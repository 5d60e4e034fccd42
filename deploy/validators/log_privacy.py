"""What nginx writes to its logs: never a credential or a request body.

  nginx-log-privacy  no `log_format` of an nginx config mounted into an nginx service uses a
                     credential-carrying variable (`$http_authorization`, cookies, any
                     `$http_<header>` whose name says token/secret/auth, ...) or a body
                     (`$request_body`); no `error_log` logs at `debug` level, which writes the
                     request headers. The collector ships every log off the host.
  engine-log-privacy an engine logs request metadata only: `--log-requests-level` (SGLang's
                     default 2 when `--log-requests` is given without it) at most 1; levels 2
                     and 3 write prompts, images and outputs into the engine's log
"""

from __future__ import annotations

import re

from deploy.validators import nginx_conf, topology
from deploy.validators.compose_doc import Finding, command_argv, join_path
from deploy.validators.model import Model
from deploy.validators.service_classes import NGINX_LOG_PRIVACY
from deploy.validators.tier import Tier
from deploy.validators.topology import nginx_configs

_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
VERBOSE_LEVELS = ("debug",)


def _forbidden(text: str) -> list[str]:
    policy = NGINX_LOG_PRIVACY
    found = []
    for match in _VARIABLE.finditer(text):
        var = "$" + match.group(1).lower()
        header = var[len("$http_"):] if var.startswith("$http_") else ""
        if (any(var == v or (v.endswith("_") and var.startswith(v)) for v in policy.variables)
                or (header and re.search(policy.name_pattern, header))):
            found.append(var)
    return list(dict.fromkeys(found))


def log_privacy_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    for item in nginx_configs(model.as_compose_file()):
        if item.syntax_error is not None:
            continue  # the nginx validator reports it
        for d in nginx_conf.walk(item.directives):
            if d.name == "log_format" and len(d.args) > 1:
                bad = _forbidden(" ".join(a.text for a in d.args[1:]))
                if bad:
                    findings.append(model.finding(item.where, (
                        f"nginx-log-privacy: line {d.line} log_format {d.args[0].text} logs "
                        f"{', '.join(bad)} ({NGINX_LOG_PRIVACY.why}); drop them from the format")))
            elif d.name == "error_log" and len(d.args) > 1 and d.args[-1].text in VERBOSE_LEVELS:
                findings.append(model.finding(item.where, (
                    f"nginx-log-privacy: line {d.line} error_log at level {d.args[-1].text} "
                    f"writes request headers, bearer tokens included ({NGINX_LOG_PRIVACY.why}); "
                    "log at warn or above")))
    return findings


# SGLang's --log-requests-level: 0 metadata, 1 + sampling parameters, 2 + partial input/output,
# 3 everything. Its default when --log-requests is on and no level is given.
MAX_ENGINE_LOG_LEVEL = 1
DEFAULT_ENGINE_LOG_LEVEL = 2


def engine_log_findings(model: Model, tier: Tier) -> list[Finding]:
    findings = []
    for name in topology.engines(model.as_compose_file()):
        argv = command_argv(model.services[name].get("command"))
        level: int | None = None
        for i, token in enumerate(argv):
            value = (argv[i + 1] if token == "--log-requests-level" and i + 1 < len(argv)
                     else token.split("=", 1)[1] if token.startswith("--log-requests-level=")
                     else None)
            if value is not None:
                level = int(value) if value.isdigit() else DEFAULT_ENGINE_LOG_LEVEL + 1
                where = join_path("services", name, "command", i)
        if level is None and "--log-requests" in argv:
            level, where = DEFAULT_ENGINE_LOG_LEVEL, join_path(
                "services", name, "command", argv.index("--log-requests"))
        if level is not None and level > MAX_ENGINE_LOG_LEVEL:
            findings.append(model.finding(where, (
                f"engine-log-privacy: request logging at level {level} writes prompts, images "
                f"and outputs into the engine's log ({NGINX_LOG_PRIVACY.why}); use "
                f"--log-requests-level 0 (metadata only)")))
    return findings


RULES = (log_privacy_findings, engine_log_findings)
