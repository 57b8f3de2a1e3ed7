"""One JSON answer from a standard-library ``http.server`` handler.

The builtin model server, the replay server and the Ray executor's channel each answer this
way; one function, so their length and content-type headers cannot drift apart.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
    """``payload`` as the whole body, with its length (the handlers keep connections alive)."""
    body = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


__all__ = ["send_json"]
