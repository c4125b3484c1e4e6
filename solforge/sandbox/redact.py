"""scrub(): secrets out of any text before it is stored, cached, logged or sent to a model.

Two nets: the values of every secret-looking variable in this process's environment (an API key a
compile log or a traceback echoed), and the shapes of common provider keys (a key that never was in
our environment but turned up in text anyway). Stdlib only: the compile worker and the bare GPU box
use it too.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Sequence

REDACTED = "[REDACTED]"
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|PRIVATE|SIGNATURE|DATABASE_URL"
                         r"|_DSN", re.I)
_KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-]{12,}|sk-ant-[A-Za-z0-9_\-]{12,}|hf_[A-Za-z0-9]{20,}"
                         r"|AIza[0-9A-Za-z_\-]{30,}|gsk_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,}"
                         r"|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})")


def secret_values(extra: Iterable[str] = ()) -> list[str]:
    """The given values plus every secret-looking environment variable's value, longest first."""
    vals = [v for v in extra if v]
    vals += [v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= 8]
    return sorted(set(vals), key=len, reverse=True)


def scrub(text: str, secrets: Sequence[str] | None = None) -> str:
    """`text` with every secret value (default: secret_values()) and key-shaped string replaced."""
    if not text:
        return text
    for s in (secret_values() if secrets is None else secrets):
        if s and len(s) >= 4:
            text = text.replace(s, REDACTED)
    return _KEY_SHAPES.sub(REDACTED, text)
