"""Where a judge is reached: its own endpoint, from its own ``judge.yaml``, in this process.

``base_url`` (or the variable ``base_url_env`` names) and the key in ``api_key_env``, read from
the environment of the process that asks (the runner's host side for the verifier's judge
check and the narrow ``judge`` scorer; the shell for ``judge calibrate|run|pairwise``). Never
an arm's gateway token: that exists only inside the agent's sandbox and is revoked when the
agent ends, so a judge is never reached through, or billed to, the arm it judges. It lives in
``grading`` so the verifier, the scorer and the api layer share this one copy; the key is
handed to the client only, never returned to a caller that could record it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from assay.errors import InputError
from assay.models.client import ChatClient
from assay.suites.judge_spec import LoadedJudge


def judge_base_url(judge: LoadedJudge, environ: Mapping[str, str] = os.environ) -> str:
    """The judge's base URL; an ``InputError`` naming judge.yaml when none is set (asked
    before a run writes or calls anything)."""
    spec = judge.spec
    base = spec.base_url or (environ.get(spec.base_url_env) if spec.base_url_env else None)
    if not base:
        where = (f"base_url_env {spec.base_url_env} is not set" if spec.base_url_env
                 else "no endpoint: give base_url or base_url_env")
        raise InputError(f"{judge.path}: {where}")
    return base


def judge_client(judge: LoadedJudge, *, environ: Mapping[str, str] = os.environ,
                 timeout_s: float = 120.0, max_tries: int = 5,
                 backoff_base_s: float = 0.5) -> ChatClient:
    """A client for the judge's own endpoint and key."""
    return ChatClient(judge_base_url(judge, environ), environ.get(judge.spec.api_key_env, ""),
                      judge.spec.model, timeout_s=timeout_s, max_tries=max_tries,
                      backoff_base_s=backoff_base_s)
