"""An upstream for Codex's failure paths: ``POST /v1/responses`` answered with an HTTP error.

The shared ``scripted_server`` routes only chat completions, and Codex 0.171 speaks only the
Responses API. The model name asked picks the answer (``status-400`` -> 400, ``status-401`` ->
401, …; ``slow-N`` waits N seconds, then answers 400), so one server serves every arm;
every request is kept, with its headers, so a test can see which key reached the upstream.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class ErrorUpstream:
    requests: list[Seen] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def __enter__(self) -> ErrorUpstream:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib naming
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                owner.requests.append(Seen(self.path, {k.lower(): v for k, v in
                                                       self.headers.items()}, body))
                model = str((body or {}).get("model", ""))
                code = int(model.removeprefix("status-")) if model.startswith("status-") \
                    else 400
                if model.startswith("slow-"):
                    time.sleep(float(model.removeprefix("slow-")))
                payload = json.dumps({"error": {"message": f"scripted refusal {code}",
                                                "type": "invalid_request_error"}}).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True  # a slow answer must not hold up the shutdown
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
