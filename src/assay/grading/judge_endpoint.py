"""Where a judge is reached: its own endpoint, from its own ``judge.yaml``, in this process.

``base_url`` (or the variable ``base_url_env`` names) and the key in ``api_key_env``, read from
the environment of the process that asks (the runner's host side for the verifier's judge
check; the shell for ``judge pairwise``). Never an arm's gateway token: that exists only inside
the agent's sandbox and is revoked when the agent ends, so a judge is never reached through, or
billed to, the arm it judges. (``api/judge.judge_client`` does the same for the api layer; this
one is below it so the verifier can use it.)
"""

from __future__ import annotations

import os

from assay.errors import InputError
from assay.models.client import ChatClient
from assay.suites.judge_spec import LoadedJudge


def endpoint_of(judge: LoadedJudge) -> tuple[str, str]:
    """The judge's base URL and key; InputError when no base URL is set."""
    spec = judge.spec
    base = spec.base_url or (os.environ.get(spec.base_url_env) if spec.base_url_env else None)
    if not base:
        where = (f"the variable {spec.base_url_env} is not set" if spec.base_url_env
                 else "judge.yaml sets neither base_url nor base_url_env")
        raise InputError(f"{judge.path}: no endpoint for the judge: {where}")
    return base, os.environ.get(spec.api_key_env, "")


def client_for(judge: LoadedJudge, *, max_tries: int = 3) -> ChatClient:
    base, key = endpoint_of(judge)
    return ChatClient(base, key, judge.spec.model, max_tries=max_tries, backoff_base_s=0.2)
