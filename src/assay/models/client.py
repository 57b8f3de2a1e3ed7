"""One chat completion against any OpenAI-compatible endpoint, with honest transport retries.

Transport trouble (429, 5xx, timeouts, dropped connections, bodies that are not JSON or over
``MAX_ANSWER_BYTES``) is the endpoint's problem, not the model's answer, so it is retried here
with backoff and never uses up the suite's single *format* retry. Every try is recorded so a
reader can see what the endpoint did. The endpoint is untrusted: at most ``MAX_ANSWER_BYTES`` of
an answer is read (a declared length over it is not read at all), and JSON nested past the
parser's recursion limit is a body that is not JSON.

The request is one POST of a JSON body over ``httpx2`` (httpx's successor), and the answer is
read from the raw body: a run needs a handful of fields, not the official client's typed
request transform (a recursive walk over every message) and response objects, nor its import
(most of a second at start-up).
Measured against a bare ``openai`` loop by ``bench/narrow_throughput.py``. The request is the
one the official client sends (``Authorization: Bearer``, JSON body, ``POST base_url +
/chat/completions``), so any OpenAI-compatible endpoint answers it the same way.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

try:
    # httpx2 (what openai 3.x runs on): its connection pool costs a fraction of httpcore 1.x's
    # per request at high concurrency (measured: ~4x less CPU in pool bookkeeping at -j 64).
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai stacks ship only httpx 1.x (same API)
    import httpx  # type: ignore[no-redef]

from assay.errors import TransportError
from assay.models.prices import MAX_COUNT
from assay.version import __version__

# Status codes that say "try again later" rather than "your request is wrong".
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
# Status codes that no retry and no other case will fix: stop the run instead of burning cases.
FATAL_STATUS = {401, 403, 404}
MAX_RETRY_AFTER_S = 300.0
#: Seconds the one request before a run's first case may take to connect and answer.
PROBE_TIMEOUT_S = 10.0
#: The most of one answer's body read (after any content encoding is undone); a longer one is a
#: ``body_too_large`` try, retried, so an endpoint cannot make a run hold an answer without end.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


@dataclass
class Try:
    """One HTTP request: what came back and how long we waited before the next one."""

    status: int | None
    error: str | None
    ms: float
    wait_s: float = 0.0

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"status": self.status, "ms": round(self.ms, 1)}
        if self.error:
            rec["error"] = self.error
        if self.wait_s:
            rec["wait_s"] = round(self.wait_s, 3)
        return rec


@dataclass
class Completion:
    content: str | None
    refusal: str | None
    served_model: str | None
    system_fingerprint: str | None
    usage: dict[str, Any] | None
    finish_reason: str | None
    latency_ms: float  # the successful try only: backoff waits are the endpoint's, not the answer's
    tries: list[Try] = field(default_factory=list)


def redact_url(url: str) -> str:
    """Base URLs sometimes carry credentials (user:pass@host, ?key=...): keep only what locates
    the endpoint, because the manifest is shared and secrets never reach a record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # HTTP-date form
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class ChatClient:
    """One endpoint, one pooled HTTP client; owns retries, timing and usage."""

    def __init__(self, base_url: str, api_key: str, model: str, *, timeout_s: float = 120.0,
                 max_tries: int = 5, backoff_base_s: float = 0.5, backoff_max_s: float = 30.0,
                 seed: int | None = None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.model = model
        self.max_answer_bytes = max_answer_bytes
        self.base_url = base_url
        self.max_tries = max(1, max_tries)
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.timeout_s = timeout_s
        self._rng = random.Random(seed)
        self._url = base_url.rstrip("/") + "/chat/completions"
        # The pool the official client uses (1000 connections, 100 kept alive); the concurrency
        # limit is the runner's worker count, not the pool.
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
            headers={"Authorization": f"Bearer {api_key or 'EMPTY'}",
                     "Content-Type": "application/json", "Accept": "application/json",
                     "User-Agent": f"assay/{__version__}"})

    async def aclose(self) -> None:
        await self._http.aclose()

    async def probe(self) -> None:
        """Raise a fatal :class:`TransportError` when nothing answers at the base URL.

        One cheap request (``GET <base_url>/models``, a short timeout, no retry) before the
        first case: a server that is down or a wrong URL otherwise costs every case its full
        backoff and leaves a run directory of infra errors. Any HTTP answer, even a 404 from a
        server without a model list or a 401, counts as "there": whether it serves chat is
        for the first real request to find out (with its own retries and its fatal codes)."""
        url = self.base_url.rstrip("/") + "/models"
        try:
            resp = await self._http.get(url, timeout=min(self.timeout_s, PROBE_TIMEOUT_S))
            await resp.aclose()
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            cause = str(exc).strip()[:200] or type(exc).__name__
            raise TransportError(
                f"cannot connect to {redact_url(self.base_url)}: is the server running and the "
                f"URL right? (GET {redact_url(url)}: {cause})",
                [Try(None, f"connection_error:{type(exc).__name__}", 0.0)], fatal=True) from None
        except httpx.HTTPError:
            return  # it answered something (a timeout or a broken reply): the run's tries decide

    def _backoff(self, n: int) -> float:
        """Exponential backoff with jitter, so many cases hitting one 503 do not retry in step."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2 ** (n - 1)))
        return ceiling * (0.5 + 0.5 * self._rng.random())

    async def complete(self, messages: list[dict[str, str]], *, temperature: float,
                       max_tokens: int | None = None) -> Completion:
        tries: list[Try] = []
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages,
                                  "temperature": temperature}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        body = json.dumps(kwargs, ensure_ascii=False, allow_nan=False).encode("utf-8")
        for n in range(1, self.max_tries + 1):
            start = time.perf_counter()
            retry_after: float | None = None
            try:
                async with self._http.stream("POST", self._url, content=body) as resp:
                    data = await _bounded_body(resp, self.max_answer_bytes)
            except httpx.TimeoutException:
                tries.append(Try(None, "timeout", (time.perf_counter() - start) * 1000))
            except httpx.TransportError as exc:  # connect, read, write, protocol errors
                tries.append(Try(None, f"connection_error:{type(exc).__name__}",
                                 (time.perf_counter() - start) * 1000))
            else:
                ms = (time.perf_counter() - start) * 1000
                status = resp.status_code
                if 200 <= status < 300:
                    parsed = ("body_too_large" if data is None else _parse_body(
                        data.decode(resp.encoding or "utf-8", errors="replace")))
                    if isinstance(parsed, str):
                        tries.append(Try(status, parsed, ms))
                    else:
                        tries.append(Try(status, None, ms))
                        parsed.latency_ms = ms
                        parsed.tries = tries
                        return parsed
                else:
                    tries.append(Try(status, f"http_{status}", ms))
                    said = _status_message(status, data or b"")
                    if status in FATAL_STATUS:
                        raise TransportError(said, tries, fatal=True)
                    if status not in RETRYABLE_STATUS:
                        raise TransportError(said, tries)
                    retry_after = _retry_after_seconds(resp.headers)
            if n == self.max_tries:
                break
            wait = (min(retry_after, MAX_RETRY_AFTER_S) if retry_after is not None
                    else self._backoff(n))
            tries[-1].wait_s = wait
            await asyncio.sleep(wait)
        last = tries[-1].error if tries else "no try"
        if tries and all((t.error or "").startswith("connection_error:ConnectError")
                         for t in tries):
            # Not one try reached the server: a wrong URL or a server that is down. Every other
            # case would wait through the same backoff, so the run stops here instead.
            raise TransportError(f"cannot connect to {redact_url(self.base_url)} "
                                 f"({len(tries)} tries): is the server running and the URL "
                                 "right?", tries, fatal=True)
        raise TransportError(f"no usable answer after {len(tries)} tries (last: {last})", tries)


async def _bounded_body(resp: httpx.Response, limit: int) -> bytes | None:
    """The body, or None once it is over ``limit`` bytes (declared or read so far: the rest is
    never read, the connection is dropped)."""
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    pieces: list[bytes] = []
    size = 0
    async for piece in resp.aiter_bytes():
        size += len(piece)
        if size > limit:
            return None
        pieces.append(piece)
    return b"".join(pieces)


def _status_message(status: int, data: bytes) -> str:
    try:
        body = json.loads(data)
        error = body.get("error") if isinstance(body, dict) else None
        msg = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError, RecursionError):
        msg = None
    text = f"HTTP {status}"
    if msg:
        text += f": {str(msg)[:300]}"
    return text


#: The longest name (served model, fingerprint, finish reason) a row keeps as sent; longer is
#: cut and marked with its length (every row would otherwise repeat megabytes of it).
_NAME_CHARS = 256


def _text_or_none(value: object, limit: int | None = None) -> str | None:
    """A field the records keep as text: gateways that send a number or an object there are
    recorded as its JSON text rather than failing the row (or the scorer that reads it); over
    ``limit`` characters, its start and its length."""
    if value is None or value == "":
        return None
    try:
        text = value if isinstance(value, str) else json.dumps(value)
    except (ValueError, RecursionError):  # deeper than the writer goes: said, not kept
        text = f"<{type(value).__name__} too deep to write>"
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… ({len(text)} chars)"
    return text


#: What of an endpoint's ``usage`` object a row keeps: this many keys, this deep, names and
#: texts this long; numbers finite, 0 to ``MAX_COUNT``.
_USAGE_KEYS, _USAGE_DEPTH, _USAGE_TEXT = 32, 3, 256


def _usage(value: Any, depth: int = 0) -> Any:
    """The ``usage`` object as the endpoint reported it, less what a record cannot hold or no
    count can be: NaN and infinities (not JSON: the row could not be written, and the run
    stopped on a traceback), numbers below 0 or over ``MAX_COUNT``, long texts, lists, deep or
    wide objects. What is left out is unknown, as if never reported (the row's usage is then
    ``incomplete`` where a figure it needs is missing); None when ``value`` is no object."""
    if not isinstance(value, dict) or depth >= _USAGE_DEPTH:
        return None
    out: dict[str, Any] = {}
    for key, v in value.items():
        if len(out) == _USAGE_KEYS:
            break
        if isinstance(v, dict):
            v = _usage(v, depth + 1)
        elif isinstance(v, int) and not isinstance(v, bool):
            v = v if 0 <= v <= MAX_COUNT else None  # (a float of 10**400 would overflow)
        elif isinstance(v, float):
            v = v if math.isfinite(v) and 0 <= v <= MAX_COUNT else None
        elif isinstance(v, str):
            v = v if len(v) <= _USAGE_TEXT else None
        elif not isinstance(v, bool):
            v = None
        if v is not None and len(key) <= _USAGE_TEXT:
            out[key] = v
    return out


def _parse_body(text: str) -> Completion | str:
    """The response body as a Completion, or a short reason why it cannot be one (retried)."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # nested too deep to parse is not JSON either
        return "non_json_body"
    if not isinstance(body, dict):
        return "malformed_body"
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "malformed_body"
    message = choices[0].get("message") or {}
    if not isinstance(message, dict):
        return "malformed_body"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        # Some gateways return content parts; keep the text parts, in order.
        if isinstance(content, list):
            content = "".join(p["text"] for p in content
                              if isinstance(p, dict) and isinstance(p.get("text"), str))
        else:
            return "malformed_body"
    return Completion(
        content=content,
        refusal=_text_or_none(message.get("refusal")),
        served_model=_text_or_none(body.get("model"), _NAME_CHARS),
        system_fingerprint=_text_or_none(body.get("system_fingerprint"), _NAME_CHARS),
        usage=_usage(body.get("usage")),
        finish_reason=_text_or_none(choices[0].get("finish_reason"), _NAME_CHARS),
        latency_ms=0.0,
    )
