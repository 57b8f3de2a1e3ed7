"""JSON from a party assay does not trust (an upstream's answer, an agent's request), parsed
so that no input can raise past the caller.

``json.loads`` refuses what is not JSON with ``ValueError``, but JSON nested deeper than the
interpreter's recursion limit (``[[[[…`` a few thousand deep: a few KiB from a hostile upstream
or agent) raises ``RecursionError``, which a handler catching ``ValueError`` lets through: in
the gateway that ended the call without its ledger row. Every parse of such bytes goes here.
"""

from __future__ import annotations

import json
from typing import Any


def parse_json(data: bytes | str) -> Any:
    """The JSON value of ``data``, or None when it is not JSON, is not UTF-8, or is nested too
    deep to parse (a JSON ``null`` is None too: no caller here tells them apart)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
