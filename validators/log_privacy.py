"""What nginx writes to its logs: never a credential or a request body.

  nginx-log-privacy  no `log_format` of an nginx config mounted into an nginx service uses a
                     credential-carrying variable (`$http_authorization`, cookies, any
                     `$http_<header>` whose name says token/secret/auth, ...) or a body
                     (`$request_body`); no `error_log` logs at `debug` level, which writes the
                     request headers. The collector ships every log off the host.
"""

from __future__ import annotations

import re

from validators import nginx_conf
from validators.compose_doc import Finding
from validators.model import Model
from validators.service_classes import NGINX_LOG_PRIVACY
from validators.tier import Tier
from validators.topology import nginx_configs

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


RULES = (log_privacy_findings,)
