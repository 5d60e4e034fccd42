"""A detect-secrets plugin for Hugging Face access tokens (`hf_` + 34 letters/digits), which
detect-secrets 1.5 has no detector for. Loaded by path from deploy/validators/secrets.py."""

import re

from detect_secrets.plugins.base import RegexBasedDetector


class HuggingFaceTokenDetector(RegexBasedDetector):
    """Scans for Hugging Face user access tokens."""

    secret_type = "Hugging Face Token"

    denylist = (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),)
