"""Models as a caller names them: the built-in ones assay serves itself, and endpoints.

``builtin/baseline`` and ``builtin/oracle`` are built from a suite and served over the same
chat-completions wire as a real endpoint (``assay serve``), so a pipeline can be tried end to
end with no model at all. An endpoint's URL is shown only redacted (no user, password or
query), because URLs carry keys more often than they should.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from assay.models.builtin import BUILTIN_PREFIX

PathLike = str | os.PathLike[str]


def serve_builtin(model: str, suite: PathLike, host: str, port: int,
                  ready: Callable[[int], None] | None = None) -> None:
    """Serve the built-in ``model`` built from ``suite`` on ``host:port`` (0: any free port)
    until interrupted; ``ready`` is called with the bound port. An unknown model is a
    ``ValueError``, a bad suite a :class:`SuiteError`."""
    from assay.api.runs import load_suite
    from assay.models.builtin import load_builtin
    from assay.models.server import serve_forever

    built = load_builtin(model, load_suite(Path(suite)))
    serve_forever(built, host, port, ready)


def redact_url(url: str) -> str:
    """``url`` as it may be printed or recorded: without credentials or query."""
    from assay.models.client import redact_url as redact

    return redact(url)


__all__ = ["BUILTIN_PREFIX", "redact_url", "serve_builtin"]
