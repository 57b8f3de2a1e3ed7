"""What a ledger row keeps of an upstream's error answer: its status and the first bytes of
its body, with anything that looks like a credential removed.

An upstream that refuses every call (llama.cpp's 500 on a tool without ``parameters``, a
provider's 404 for a misspelt model) explains itself only in that body; without it the cause
is in the server's log alone. The body is the upstream's, so it is treated as untrusted: bounded
to :data:`EXCERPT_BYTES`, decoded leniently, control characters folded to spaces, and the real
key plus any bearer token or ``sk-``/``key-`` style string replaced by ``***`` (a provider that
echoes the request's headers must not write the key into the record).
"""

from __future__ import annotations

import re

EXCERPT_BYTES = 512
_SECRETISH = re.compile(
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"
    r"|\b(?:sk|rk|pk|key|api[-_]?key|tok|token)[-_][A-Za-z0-9._-]{12,}")


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with each of ``secrets`` and every credential-looking string as ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _SECRETISH.sub(lambda m: (m.group(1) or "") + "***", text)


def error_excerpt(status: int, body: bytes, secrets: tuple[str, ...] = ()) -> str:
    """``upstream HTTP 500: <first bytes of the body>``, redacted."""
    head = body[:EXCERPT_BYTES].decode("utf-8", "replace")
    head = re.sub(r"[\x00-\x1f\x7f]+", " ", head).strip()
    more = "…" if len(body) > EXCERPT_BYTES else ""
    return redact(f"upstream HTTP {status}: {head}{more}", secrets)
