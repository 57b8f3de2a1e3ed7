"""The per-run model gateway: the only way an agent under test reaches a model.

One local HTTP server per experiment run, speaking the API each attempt's agent speaks (chat
completions, the OpenAI Responses API or Anthropic Messages: ``gateway_protocols``), on
127.0.0.1 on any free port, and optionally a Unix socket the sandbox binds into an agent's
network namespace. Each attempt gets a random scoped token; the gateway swaps it for the real
key, forwards the call to the attempt's upstream, meters it into the attempt's
``model_calls.jsonl`` and enforces its budget. The real key lives only in this object's
memory: never in a record, a log, an error message, or anything handed to a child process.

The server runs on an asyncio loop in a background thread of the caller's process, not in a
process of its own: the runner must read budgets and usage synchronously and revoke tokens at
once, agents are always other processes (so the gateway never shares a GIL with the client it
serves), and ``bench/gateway_overhead.py`` shows a thread meets the latency and throughput
targets. No retries happen here: how an agent handles a failed call is part of what is tested.

Use (the runner's side)::

    with Gateway(unix_socket=run_dir / "gateway.sock", log_path=run_dir / "gateway_events.jsonl",
                 total_cost_usd=40.0) as gw:
        token = gw.open_attempt(attempt_id, ledger_path=attempt_dir / "model_calls.jsonl",
                                upstream=Upstream(base_url, real_key), model="qwen2.5-coder-7b",
                                limits=Limits(tokens=400_000, cost_usd=1.5), prices=prices)
        # agent env: OPENAI_BASE_URL=gw.base_url, OPENAI_API_KEY=token, ASSAY_MODEL=model
        ...
        gw.close_attempt(token)
        usage = gw.attempt_usage(attempt_id)  # exhausted, cost_complete, unreachable calls ...
        if gw.total_exhausted: ...            # start no new attempt

Each call's bodies (what the agent sent, what came back, a stream reassembled) are also kept
in the attempt's transcript beside the ledger (``gateway_transcript``): content-addressed, so the
history an agent resends on every call is stored once and the transcript grows linearly with the
new messages of each step (plus a 64-byte digest per message per call), not with the square of
the steps; redacted of the scoped token and the real key; bounded per piece and per attempt;
off with ``open_attempt(..., transcripts=False)`` (the experiment's ``transcripts: false``),
when each ledger row says ``transcript: "off"``.

This module is over 400 lines: it is the server's request path, from authentication through
budget to forwarding and the ledger row, kept whole so the order of those steps (which the
guarantees depend on) reads top to bottom. Who a key names, the connection cap and the run's
spending are decided by the book of attempts (``gateway_book``, testable without a socket);
protocol details live in ``gateway_protocols``, limits in ``gateway_budget``, wire formats in
``gateway_http``.

Each attempt is opened for one protocol family (the arm's ``model.protocol``): its agent may
call that family's routes and ``/v1/models``; a route of another family is refused with a 400
that says which to call. Every refusal meant to stop an agent (budget exhausted, revoked or
unknown token) is a 4xx in the error shape of the API the agent called, never a 5xx, since
several agents retry a 5xx for minutes. The real key goes upstream in the family's own header
(``Authorization: Bearer`` for OpenAI's APIs, ``x-api-key`` for Anthropic's).

What an agent can send, and what of it goes on (the agent is untrusted; so is the upstream's
answer, parsed as strictly, ``gateway_http``):

- HTTP is parsed by llhttp (``httptools``); a malformed request (CR, LF or NUL in a header,
  folded lines, duplicated or conflicting ``Content-Length``, ``Transfer-Encoding`` with
  ``Content-Length``, a bad chunk, an absolute-form target, ``Upgrade``) is a 400 and a
  ``refused`` gateway event, and nothing of it reaches the upstream: a call is forwarded only
  once its whole request has been parsed.
- Paths: exactly the attempt's family's routes (``family_paths``) and ``GET /v1/models``; any
  other path is a 404, a route of another family a 400, each a ledger row, never forwarded.
  The upstream path is the route's own constant, never the agent's bytes.
- Query strings: only the parameters the API defines for the route (``?beta=true`` on
  Anthropic's messages, ``limit``/``before_id``/``after_id`` on Anthropic's models list), with
  plain-word values, re-encoded; anything else is a 400 and a ledger row.
- Headers: only ``FORWARDED_HEADERS`` of the family (content type, accept, user agent and the
  API's version headers: ``openai-beta``; ``anthropic-version``, ``anthropic-beta``). The
  agent's own credentials, cookies, hop-by-hop and proxy headers, SDK telemetry and account
  selectors stay here; the gateway sets the real key, ``Host``, ``Content-Length`` and
  ``Accept-Encoding: identity`` itself.
- Bounds (``ServerLimits``, recorded per session in the run's manifest): a request body of
  ``limits.request_body_mib`` (default 32 MiB; 413, read only up to the limit), a head of
  64 KiB and 100 fields (431), a head complete within 10 s of its first byte or of the
  connection's start, a body within 60 s more (408 and the connection dropped: a slow-loris
  client holds nothing for long), an idle keep-alive connection 120 s, and
  ``CONNECTIONS_PER_ATTEMPT`` (32) connections held open by one attempt's token (429 past it),
  and ``MAX_CONNECTIONS`` (2048, or half the descriptor limit) open in all (closed unread
  past it, one ``gateway_busy`` event a second).
  A plain upstream answer is held up to 64 MiB, an SSE event up to ``MAX_EVENT`` (8 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import resource
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from assay.errors import TransportError
from assay.models.gateway.book import AttemptBook, Refusal, new_token
from assay.models.gateway.budget import AttemptUsage, Budget, Limits
from assay.models.gateway.channel import CONNECTION_RATE, Channel, remove_socket
from assay.models.gateway.fair import CONCURRENT_REQUESTS, THROTTLED, FairGate, Slot, ThrottledBy
from assay.models.gateway.http import (
    HOP_BY_HOP,
    LAST_CHUNK,
    MAX_HEAD,
    AgentConnection,
    BadRequest,
    Request,
    ServerLimits,
    UpstreamPool,
    chunk,
    response_head,
)
from assay.models.gateway.protocols import (
    FAMILIES,
    FORWARDED_HEADERS,
    MODELS_QUERY,
    ROUTES,
    Family,
    Outcome,
    Prepared,
    WireProtocol,
    family_paths,
)
from assay.models.gateway.reassemble import StreamCollector
from assay.models.gateway.transcript import TranscriptWriter, plain_response
from assay.models.gateway.wire import ErrorShape, error_body, error_shape
from assay.models.ledger import LedgerFile, Syncer
from assay.models.prices import ModelPrice, call_cost, price_table
from assay.models.untrusted_json import parse_json
from assay.models.upstream_error import error_excerpt
from assay.records.ledger import GatewayEvent, LimitName

__all__ = ["AttemptUsage", "Gateway", "Limits", "Secret", "ServerLimits", "Upstream"]

_JSON = [("Content-Type", "application/json")]
#: Connections one attempt may hold open at once. An agent opens a new connection only when
#: its open ones are busy, so this is its peak of calls in flight: Claude Code with parallel
#: subagents stays around ten. Past it a new connection is answered 429 and closed.
CONNECTIONS_PER_ATTEMPT = 32
#: Agent connections open at once, all attempts together (authenticated or not yet): past it a
#: new connection is closed at once, so a flood of idle connections cannot take the file
#: descriptors the runner needs for ledgers and sandboxes. Each unauthenticated one lasts at
#: most the header timeout. At most half the process's descriptor limit.
MAX_CONNECTIONS = 2048
#: Connections of one attempt whose request head is not complete yet (a new connection on the
#: attempt's channel counts from its accept): past it a new one is answered 429 and closed.
#: An agent writes its head in one go, so more than a few at once is a flood.
HEADS_PER_ATTEMPT = 16
#: The longest SSE event the gateway waits for before handing it on (it must see whole events
#: to meter them); a stream with a longer one is cut, its usage unknown.
MAX_EVENT = 8 * 1024 * 1024
_NOT_RETURNED = HOP_BY_HOP | {"set-cookie", "content-encoding"}
#: Sent to an Anthropic upstream when the agent named no API version (the API requires one).
ANTHROPIC_VERSION = "2023-06-01"


class Secret:
    """A string that does not show itself: repr, str and format print a mask, so a key cannot
    leak through a log line, an exception or a debugger's view of a dataclass."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value:
            raise ValueError("an empty API key")
        if any(c in value for c in "\r\n\0"):
            raise ValueError("an API key with CR, LF or NUL in it")  # never the key itself
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not pickled: it must not leave this process")


@dataclass(frozen=True)
class Upstream:
    """Where an attempt's calls go. ``stream_usage`` False: the upstream rejects
    ``stream_options`` (streamed calls then have no usage and are flagged as such)."""

    base_url: str
    api_key: Secret = field(repr=False)
    stream_usage: bool = True
    connect_timeout: float = 10.0
    read_timeout: float = 600.0

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            object.__setattr__(self, "api_key", Secret(self.api_key))


@dataclass
class _Attempt:
    attempt_id: str
    ledger: LedgerFile
    upstream: Upstream
    pool: UpstreamPool
    model: str
    budget: Budget
    protocol: Family = "chat"
    seq: int = 0
    open: bool = True
    # agent connections counted against CONNECTIONS_PER_ATTEMPT
    connections: int = 0
    # of them, those whose request head is unfinished (HEADS_PER_ATTEMPT)
    heads: int = 0
    # the attempt's own listening sockets (``open_channel``)
    channels: list[Channel] = field(default_factory=list)
    inflight: set[asyncio.Task[Any]] = field(default_factory=set)
    # the attempt's transcript files (``gateway_transcript``); None with transcripts off
    transcript: TranscriptWriter | None = None
    # the slots of its upstream, shared with every attempt calling the same one
    gate: FairGate = field(default_factory=FairGate)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(status: int, message: str, kind: str, code: str | None = None,
           shape: ErrorShape = "openai") -> tuple[int, bytes]:
    return status, error_body(shape, status, message, kind, code)


class Gateway:
    """Start with ``with Gateway() as gw:`` (or ``start()``/``stop()``); then ``open_attempt``
    per attempt, hand the agent ``gw.base_url`` and the token, ``close_attempt`` when it ends.
    Every public method is safe to call from any thread but the gateway's own."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 unix_socket: Path | str | None = None, log_path: Path | None = None,
                 total_cost_usd: float | None = None, limits: ServerLimits | None = None,
                 connections_per_attempt: int = CONNECTIONS_PER_ATTEMPT,
                 heads_per_attempt: int = HEADS_PER_ATTEMPT,
                 concurrent_requests: int = CONCURRENT_REQUESTS,
                 max_connections: int | None = None) -> None:
        self.book: AttemptBook[_Attempt] = AttemptBook(
            total_cost_usd=total_cost_usd, connections_per_attempt=connections_per_attempt,
            heads_per_attempt=heads_per_attempt)
        self.host = host
        self.limits = limits or ServerLimits()
        self._want_port = port
        self.unix_socket = Path(unix_socket) if unix_socket is not None else None
        self.log_path = log_path
        self._lock = threading.Lock()  # the pools and the events; the book has its own
        self._pools: dict[tuple[str, float, float], UpstreamPool] = {}
        self._gates: dict[tuple[str, float, float], FairGate] = {}
        if concurrent_requests < 1:
            raise ValueError("concurrent_requests must be at least 1")
        self.concurrent_requests = concurrent_requests
        self._events: list[GatewayEvent] = []
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._conns: set[asyncio.Task[Any]] = set()
        self._starting: set[asyncio.Task[Any]] = set()  # channel connections being set up
        # never past half the descriptor limit, whatever the experiment asked
        self.max_connections = min(max_connections or MAX_CONNECTIONS, _connection_ceiling())
        self._dropped = 0  # connections closed at the ceiling since the last event said so
        self._dropped_noted = 0.0
        self._shared = 0  # connections open on the shared listeners (not an attempt's channel)
        self._channel_attempts = 0  # attempts with a channel open: the ceiling's shares
        self._channel_ids = 0
        # refusals of a channel's connections not yet in an event: (attempt, reason) ->
        # [count, when last noted, (status, detail, limit, figure) of the last one]
        self._pending: dict[tuple[str, str], list[Any]] = {}
        self._syncer: Syncer | None = None
        self._log: LedgerFile | None = None

    # ------------------------------------------------------------------------- lifecycle

    def start(self) -> Gateway:
        if self._thread is not None:
            raise ValueError("gateway already started")
        self._syncer = Syncer()
        if self.log_path is not None:
            self._log = LedgerFile(self.log_path, self._syncer)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._bind())
            except BaseException as exc:  # handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="assay-gateway", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            self._close_files()
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving, close every ledger (synced) and forget every token."""
        thread, loop = self._thread, self._loop
        if thread is not None and loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
        self._thread = self._loop = None
        self.book.revoke_all()
        self._close_files()

    def _close_files(self) -> None:
        for attempt in self.book.entries():
            attempt.ledger.close()
            if attempt.transcript is not None:
                attempt.transcript.close()
        if self._log is not None:
            self._log.close()
        if self._syncer is not None:
            self._syncer.stop()
        if self.unix_socket is not None and self._port is not None:
            remove_socket(self.unix_socket)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        open_now = self.book.open_count
        where = self.base_url if self._port is not None else "not started"
        return f"Gateway({where}, open_attempts={open_now}, spent_usd={self.book.spent():.6f})"

    def applied_limits(self) -> dict[str, float | int]:
        """The bounds this gateway enforces, for the run's manifest."""
        lim = self.limits
        return {"request_body_mib": lim.request_body_bytes / (1024 * 1024),
                "connections_per_attempt": self.connections_per_attempt,
                "header_timeout_seconds": lim.header_timeout,
                "body_timeout_seconds": lim.body_timeout,
                "idle_timeout_seconds": lim.idle_timeout,
                "connections_total": self.max_connections,
                "unfinished_heads_per_attempt": self.book.heads_per_attempt,
                "concurrent_requests": self.concurrent_requests,
                "request_head_kib": MAX_HEAD // 1024, "sse_event_mib": MAX_EVENT // (1024 * 1024)}

    @property
    def port(self) -> int:
        if self._port is None:
            raise ValueError("gateway not started")
        return self._port

    @property
    def base_url(self) -> str:
        """What an agent gets as ``OPENAI_BASE_URL``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """What an Anthropic client gets as ``ANTHROPIC_BASE_URL`` (it appends ``/v1/...``)."""
        return f"http://{self.host}:{self.port}"

    async def _bind(self) -> None:
        server = await asyncio.start_server(self._on_connection, self.host, self._want_port,
                                            backlog=1024, limit=MAX_HEAD)
        self._servers.append(server)
        self._port = server.sockets[0].getsockname()[1]
        if self.unix_socket is not None:
            remove_socket(self.unix_socket)  # a stale one from a killed run
            self._servers.append(await asyncio.start_unix_server(
                self._on_connection, path=str(self.unix_socket), backlog=1024, limit=MAX_HEAD))

    async def _shutdown(self) -> None:
        for key in list(self._pending):
            self._note_pending(key)
        for server in self._servers:
            server.close()
        for attempt in self.book.entries():
            for channel in attempt.channels:
                channel.close()
        for task in list(self._starting):
            task.cancel()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        for pool in self._pools.values():
            pool.close()

    @property
    def total_cost_usd(self) -> float | None:
        return self.book.total_cost_usd

    @property
    def connections_per_attempt(self) -> int:
        return self.book.connections_per_attempt

    # ------------------------------------------------------------------------- attempts

    def open_attempt(self, attempt_id: str, *, ledger_path: Path, upstream: Upstream,
                     model: str, limits: Limits | None = None,
                     prices: dict[str, ModelPrice] | dict[str, dict[str, float]] | None = None,
                     protocol: Family = "chat", transcripts: bool = True) -> str:
        """A new scoped token for one attempt, valid until ``close_attempt``; its agent speaks
        ``protocol`` (``chat``, ``responses`` or ``anthropic``), and so does the upstream.
        ``transcripts``: keep each model call's bodies beside the ledger
        (``gateway_transcript``); False keeps none and each ledger row says ``"off"``."""
        if self._thread is None:
            raise ValueError("gateway not started")
        if protocol not in FAMILIES:
            raise ValueError(f"unknown protocol {protocol!r} (known: {', '.join(FAMILIES)})")
        limits = limits or Limits()
        price = price_table(prices or {}).get(model)
        if limits.cost_usd is not None and price is None:
            raise ValueError(f"a cost limit for model {model!r} needs its price in the table")
        key = (upstream.base_url, upstream.connect_timeout, upstream.read_timeout)
        self.book.check_new(attempt_id)
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = UpstreamPool(
                    upstream.base_url, connect_timeout=upstream.connect_timeout,
                    read_timeout=upstream.read_timeout)
                self._gates[key] = FairGate(self.concurrent_requests)
            gate = self._gates[key]
        token = new_token()
        loop = self._loop
        if loop is not None:  # the stale connections of earlier attempts' upstreams go
            loop.call_soon_threadsafe(self._close_stale)
        attempt = _Attempt(attempt_id, LedgerFile(Path(ledger_path), self._syncer_()),
                           upstream, pool, model, Budget(limits, price), protocol, gate=gate)
        if transcripts:
            attempt.transcript = TranscriptWriter(
                Path(ledger_path).parent, self._syncer_(),
                [token, upstream.api_key.reveal()])
        return self.book.issue(attempt, token)

    def _close_stale(self) -> None:
        """Close every pool's idle connections too old to be reused (on the loop): a run of
        many tasks against a replay upstream (one URL a task) kept one open connection per
        task and arm to the end."""
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.close_stale()

    def _syncer_(self) -> Syncer:
        assert self._syncer is not None
        return self._syncer

    def close_attempt(self, token: str) -> None:
        """Revoke the token (later calls get 401), end the attempt's calls still in flight
        (each recorded as cut short), and close its ledger, synced. Idempotent."""
        attempt = self.book.revoke(token)
        if attempt is None:
            return
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            for channel in attempt.channels:  # the loop is gone: only the files are left
                if channel.path is not None:
                    remove_socket(channel.path)
            attempt.ledger.close()
            if attempt.transcript is not None:
                attempt.transcript.close()
            self.book.retire(attempt)
            return
        if threading.current_thread() is self._thread:
            raise ValueError("close_attempt must not be called from the gateway's own thread")
        asyncio.run_coroutine_threadsafe(self._end(attempt), loop).result(60)
        # its calls are ended and its files closed: only its usage is kept (book.retire)
        self.book.retire(attempt)

    async def _end(self, attempt: _Attempt) -> None:
        self._close_channels(attempt)
        tasks = list(attempt.inflight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, attempt.ledger.close)
        if attempt.transcript is not None:
            await asyncio.get_running_loop().run_in_executor(None, attempt.transcript.close)

    def open_channel(self, token: str) -> Path:
        """The attempt's own Unix socket (beside the gateway's ``unix_socket``): every
        connection accepted on it belongs to the attempt before its first byte, so its
        connection, unfinished-head and share limits hold whatever the agent sends, and a
        refusal names the attempt. Bound into the attempt's sandbox in place of the shared
        socket; removed when the attempt closes."""
        if self.unix_socket is None:
            raise ValueError("open_channel needs a gateway with a unix_socket (its folder "
                             "holds the channels); use open_tcp_channel")
        self._channel_ids += 1
        path = self.unix_socket.parent / f"a{self._channel_ids}.sock"
        self._run_on_loop(self._open_channel(self._live(token), path))
        return path

    def open_tcp_channel(self, token: str) -> tuple[str, int]:
        """As :meth:`open_channel`, on a TCP port of its own (for a sandbox on another node,
        whose relay reaches the gateway over the network)."""
        return self._run_on_loop(self._open_channel(self._live(token), None))

    def _live(self, token: str) -> _Attempt:
        attempt = self.book.caller([token]).attempt
        if attempt is None:
            raise ValueError("open_channel: not a live token of this gateway")
        return attempt

    def _run_on_loop(self, coro: Any) -> Any:
        loop = self._loop
        if loop is None or self._thread is None:
            coro.close()
            raise ValueError("gateway not started")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    async def _open_channel(self, attempt: _Attempt, path: Path | None) -> Any:
        loop = asyncio.get_running_loop()
        aid = attempt.attempt_id

        def hold() -> str | None:
            """Hold the channel's backlog while the attempt has its most unfinished heads:
            a flood of heads waits in the kernel, and a real agent's burst of parallel
            connections is only delayed, never refused."""
            return "head_cap" if attempt.heads >= self.book.heads_per_attempt else None

        def paced(reason: str) -> None:
            if reason == "head_cap":
                self._count_refusal(
                    aid, "head_cap", 429,
                    f"attempt {aid} holds {attempt.heads} connections whose request head is "
                    "unfinished: its channel accepts no more until one completes",
                    limit=self.book.heads_per_attempt, figure=attempt.heads)
            else:
                self._count_refusal(
                    aid, "connection_rate", 429,
                    f"attempt {aid} opened connections faster than {CONNECTION_RATE:g} a "
                    "second: the rest waited in its channel's backlog",
                    limit=int(CONNECTION_RATE))

        channel = Channel(loop, lambda sock: self._admit(attempt, sock, path is not None),
                          paced, hold=hold, path=path, host=self.host)
        if not attempt.channels:
            self._channel_attempts += 1
        attempt.channels.append(channel)
        return path if path is not None else channel.address

    def _admit(self, attempt: _Attempt, sock: Any, unix: bool) -> None:
        """A socket the attempt's channel accepted: counted against the attempt at once (in
        the accept's own turn of the loop, so a batch of accepts meets the limits one by
        one), or answered and closed unread."""
        if not attempt.open or len(self._conns) + len(self._starting) >= self.max_connections:
            sock.close()
            if attempt.open:
                self._dropped_channel(attempt)
            return
        refusal = self.book.admit(attempt, self._share())
        if refusal is not None:
            self._refuse_connection(attempt, refusal, sock)
            return
        task = asyncio.get_running_loop().create_task(
            self._on_channel_socket(attempt, sock, unix))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _on_channel_socket(self, attempt: _Attempt, sock: Any, unix: bool) -> None:
        try:
            if unix:
                reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_HEAD)
            else:
                reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_HEAD)
        except (OSError, asyncio.CancelledError):
            sock.close()
            self.book.release_connection(attempt)
            self.book.head_changed(attempt, -1)
            return
        await self._on_channel(attempt, reader, writer)

    def _close_channels(self, attempt: _Attempt) -> None:
        """Stop accepting on the attempt's channels (its open connections end with it) and
        note the refusals not yet in an event."""
        if attempt.channels:
            self._channel_attempts -= 1
        for channel in attempt.channels:
            channel.close()
        attempt.channels.clear()
        for key in [k for k in self._pending if k[0] == attempt.attempt_id]:
            self._note_pending(key)

    def attempt_usage(self, token_or_id: str) -> AttemptUsage:
        """``{calls, input, cached_input, cache_write_input, output, reasoning, tokens, cost_usd,
        cost_complete, usage_missing_calls, assistant_steps, upstream_unreachable_calls,
        exhausted}`` (``tokens`` as the tokens limit counts them, see ``Limits``); readable
        after the attempt closed. ``cost_usd`` is a lower bound when ``cost_complete`` is
        False; ``upstream_unreachable_calls`` > 0 is the runner's ``infra_error`` signal."""
        return self.book.usage(token_or_id)

    def spent(self) -> float:
        """USD spent by every attempt so far (a lower bound unless ``spent_complete()``)."""
        return self.book.spent()

    def spent_complete(self) -> bool:
        return self.book.spent_complete()

    @property
    def total_exhausted(self) -> bool:
        """True once ``total_cost_usd`` is reached: the runner starts no new attempt."""
        return self.book.total_exhausted

    @property
    def events(self) -> list[GatewayEvent]:
        """Requests refused before they became an attempt's call, oldest first."""
        with self._lock:
            return list(self._events)

    # ------------------------------------------------------------------------- serving

    def _share(self) -> int:
        """One part of the gateway-wide ceiling: each attempt with a channel gets one, the
        shared listeners (agents that reach the gateway without a channel) one together, so
        no attempt can take the connections another attempt's agent needs."""
        return max(1, self.max_connections // (self._channel_attempts + 1))

    async def _on_connection(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        """A connection on the shared listeners: whose it is is known only once a request's
        token has been read, so they are held together to one share of the ceiling."""
        task = asyncio.current_task()
        assert task is not None
        if len(self._conns) >= self.max_connections or self._shared >= self._share():
            self._drop(writer)
            return
        self._conns.add(task)
        self._shared += 1
        conn = AgentConnection(reader, writer, self.limits)
        held: list[_Attempt] = []  # the attempt this connection counts against, once known
        try:
            await self._converse(conn, writer, held, None)
        finally:
            self._conns.discard(task)
            self._shared -= 1
            if held:
                self.book.release_connection(held[0])
            writer.close()

    async def _on_channel(self, attempt: _Attempt, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        """A connection on an attempt's own channel, admitted (counted) at its accept."""
        task = asyncio.current_task()
        assert task is not None
        self._starting.discard(task)  # set up: now one of the open connections
        self._conns.add(task)
        conn = AgentConnection(reader, writer, self.limits,
                               on_head=lambda delta: self.book.head_changed(attempt, delta))
        try:
            await self._converse(conn, writer, [attempt], attempt)
        finally:
            self._conns.discard(task)
            self.book.release_connection(attempt)
            if conn.head_pending:
                self.book.head_changed(attempt, -1)
            writer.close()

    async def _converse(self, conn: AgentConnection, writer: asyncio.StreamWriter,
                        held: list[_Attempt], channel: _Attempt | None) -> None:
        """Requests of one connection, answered in turn until it closes."""
        try:
            while True:
                try:
                    request = await conn.next_request()
                except BadRequest as exc:
                    await self._refuse(writer, exc, channel)
                    return
                if request is None:
                    return
                if (not await self._dispatch(request, writer, held, channel)
                        or not request.keep_alive):
                    return
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass

    def _refuse_connection(self, attempt: _Attempt, refusal: Refusal, sock: Any) -> None:
        """Answer a channel's connection past one of its attempt's limits and close it,
        without reading it; the refusals are noted at most once a second per reason."""
        status = 503 if refusal.reason == "gateway_share" else 429
        what = {"connection_cap": "connections open",
                "head_cap": "connections whose request head is unfinished",
                "gateway_share": "connections open, its share of the gateway-wide ceiling"}
        message = (f"attempt {attempt.attempt_id} already holds {refusal.figure} "
                   f"{what[refusal.reason]} (limit {refusal.limit})")
        _, body = _error(status, f"assay gateway: {message}", "rate_limit_error",
                         refusal.reason)
        with contextlib.suppress(OSError):  # a fresh socket: the answer fits its buffer
            sock.send(response_head(status, _JSON, length=len(body), close=True) + body)
        sock.close()
        self._count_refusal(attempt.attempt_id, refusal.reason, status,
                            f"connection(s) refused unread: {message}",
                            limit=refusal.limit, figure=refusal.figure)

    def _dropped_channel(self, attempt: _Attempt) -> None:
        self._count_refusal(attempt.attempt_id, "gateway_busy", 503,
                            f"connection(s) closed unread: {self.max_connections} were "
                            "already open in all", limit=self.max_connections,
                            figure=len(self._conns) + len(self._starting))

    def _count_refusal(self, attempt_id: str, reason: str, status: int, detail: str, *,
                       limit: int | None = None, figure: int | None = None,
                       kind: str = "refused") -> None:
        """Count one refusal of a channel's connection; an event at once if none for this
        attempt and reason was written in the last second, else with the next (or at the
        attempt's end): what one attempt does costs the gateway at most one row a second
        per reason, however fast it opens connections."""
        key = (attempt_id, reason)
        entry = self._pending.setdefault(key, [0, 0.0, None])
        entry[0] += 1
        entry[2] = (kind, status, detail, limit, figure)
        if time.monotonic() - entry[1] >= 1.0:
            self._note_pending(key)

    def _note_pending(self, key: tuple[str, str]) -> None:
        entry = self._pending.get(key)
        if entry is None or entry[0] == 0:
            return
        attempt_id, reason = key
        count, _, (kind, status, detail, limit, figure) = entry
        if count > 1:
            detail = f"{count} times, the last: {detail}"
        self._note(kind, reason, attempt_id, None, status, detail, limit=limit,
                   figure=figure, count=count)
        entry[0], entry[1] = 0, time.monotonic()

    def _drop(self, writer: asyncio.StreamWriter) -> None:
        """Close a connection over ``max_connections``; one event a second says how many."""
        writer.transport.abort()
        self._dropped += 1
        now = time.monotonic()
        if now - self._dropped_noted >= 1.0:
            self._note("refused", "gateway_busy", None, None, 503,
                       f"{self._dropped} connections closed unread: {self.max_connections} "
                       "were already open", limit=self.max_connections,
                       figure=len(self._conns), count=self._dropped)
            self._dropped, self._dropped_noted = 0, now

    async def _refuse(self, writer: asyncio.StreamWriter, exc: BadRequest,
                      channel: _Attempt | None = None) -> None:
        """Answer a request the gateway would not take, record it, and let the connection
        close (a parser that refused cannot find the next request's start). On a channel the
        connection's attempt is known even when no head was read."""
        head = exc.head
        if channel is not None:  # counted, noted at most once a second: a flood of them
            self._count_refusal(channel.attempt_id, exc.reason, exc.status, str(exc))
        else:
            attempt_id = None
            if head is not None:
                attempt_id = self.book.attempt_id_of(_tokens_of(head.headers))
            self._note("refused", exc.reason, attempt_id, head, exc.status, str(exc))
        shape = error_shape(head.path) if head is not None else "openai"
        kind = "request_too_large" if exc.status == 413 else "invalid_request_error"
        phrase = HTTPStatus(exc.status).phrase.lower()
        status, body = _error(exc.status, f"assay gateway: {phrase}: {exc}", kind, exc.reason,
                              shape)
        writer.write(response_head(status, _JSON, length=len(body), close=True) + body)
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            async with asyncio.timeout(5):
                await writer.drain()

    async def _dispatch(self, request: Request, writer: asyncio.StreamWriter,
                        held: list[_Attempt], channel: _Attempt | None = None) -> bool:
        """Answer one request; False when the connection must close."""
        # An Anthropic client sends its key as x-api-key, others as a bearer token; a client may
        # send both (one of them a placeholder), so the first the gateway knows wins.
        caller = self.book.caller(_tokens_of(request.headers))
        attempt = caller.attempt
        if channel is not None and attempt is not None and attempt is not channel:
            # one attempt's agent holding another's token: refused, on its own channel's record
            message = (f"this is attempt {channel.attempt_id}'s channel; the key given "
                       "belongs to another attempt")
            self._count_refusal(channel.attempt_id, "wrong_channel", 401, message,
                                kind="unauthorized")
            status, body = _error(401, message, "invalid_request_error", "invalid_api_key",
                                  error_shape(request.path))
            await _send(writer, status, _JSON, body, False)
            return False
        over_cap = False
        if attempt is not None and not held:
            if self.book.hold_connection(attempt):
                held.append(attempt)
            else:
                over_cap = True
        if attempt is None:
            reason = caller.reason
            if channel is not None:
                self._count_refusal(channel.attempt_id, reason, 401,
                                    f"{request.method} {request.path[:200]}: {reason}",
                                    kind="unauthorized")
            else:
                self._note("unauthorized", reason, caller.revoked_for, request, 401)
            message = {"no_token": "no API key given",
                       "unknown_token": "invalid API key for this gateway",
                       "revoked_token": "this API key was revoked: its attempt has ended"}[reason]
            status, body = _error(401, message, "invalid_request_error", "invalid_api_key",
                                  error_shape(request.path))
            return await _send(writer, status, _JSON, body, request.keep_alive)
        if over_cap:
            message = (f"attempt {attempt.attempt_id} already holds "
                       f"{self.connections_per_attempt} connections to the gateway, the most "
                       "an attempt may hold open")
            self._note("refused", "connection_cap", attempt.attempt_id, request, 429, message,
                       limit=self.connections_per_attempt, figure=attempt.connections)
            status, body = _error(429, f"assay gateway: {message}", "rate_limit_error",
                                  "connection_cap", error_shape(request.path))
            await _send(writer, status, _JSON, body, False)
            return False
        task = asyncio.current_task()
        assert task is not None
        attempt.inflight.add(task)
        try:
            return await self._serve(attempt, request, writer)
        finally:
            attempt.inflight.discard(task)

    def _note(self, kind: str, reason: str, attempt_id: str | None, request: Request | None,
              status: int, detail: str | None = None, *, limit: int | None = None,
              figure: int | None = None, count: int = 1) -> None:
        event = GatewayEvent(time=_now(), kind=kind, reason=reason,
                             attempt_id=attempt_id,
                             method=request.method if request is not None else None,
                             path=request.path if request is not None else None,
                             status=status, detail=detail, limit=limit, figure=figure,
                             count=count)
        with self._lock:
            self._events.append(event)
        if self._log is not None:
            self._log.append(event.to_json())

    async def _serve(self, attempt: _Attempt, request: Request,
                     writer: asyncio.StreamWriter) -> bool:
        call = _Call(attempt, request)
        attempt.seq += 1
        call.seq = attempt.seq
        protocol = ROUTES.get((request.method, request.path))
        is_models = request.method == "GET" and request.path == "/v1/models"
        call.endpoint = protocol.name if protocol else ("models" if is_models else request.path)
        shape = error_shape(request.path)
        if protocol is not None and protocol.family != attempt.protocol:
            call.error = (f"{request.method} {request.path} is the {protocol.family!r} API, but "
                          f"this attempt's model is served over {attempt.protocol!r} "
                          f"({', '.join(family_paths(attempt.protocol))}); set the arm's "
                          f"model.protocol to {protocol.family!r} to call it")
            status, body = _error(400, call.error, "invalid_request_error", "wrong_protocol",
                                  shape)
            self._finish(call, status)
            return await _send(writer, status, _JSON, body, request.keep_alive)
        if protocol is not None:
            call.metered = protocol.metered
            call.model_upstream = attempt.model
            call.prepared = protocol.prepare(request.body, attempt.model,
                                             stream_usage=attempt.upstream.stream_usage)
            call.stream, call.model_asked = call.prepared.stream, call.prepared.model_asked
        if attempt.budget.exhausted is not None:
            call.exhausted = attempt.budget.exhausted
            call.error = attempt.budget.refusal()
            status, body = _error(403, call.error, "budget_exhausted", "budget_exhausted",
                                  shape)
            self._finish(call, status)
            return await _send(writer, status, _JSON, body, request.keep_alive)
        if protocol is None and not is_models:
            call.error = (f"no route for {request.method} {request.path} (this attempt may "
                          f"call {', '.join(family_paths(attempt.protocol))}, GET /v1/models)")
            status, body = _error(404, call.error, "invalid_request_error", "unknown_url",
                                  shape)
            self._finish(call, status)
            return await _send(writer, status, _JSON, body, request.keep_alive)
        allowed = protocol.query if protocol is not None else MODELS_QUERY[attempt.protocol]
        query, problem = _query(request.query, allowed)
        if problem is not None:
            call.error = f"{request.method} {request.path}: {problem}"
            status, body = _error(400, call.error, "invalid_request_error", "unknown_parameter",
                                  shape)
            self._finish(call, status)
            return await _send(writer, status, _JSON, body, request.keep_alive)
        call.query = query
        try:
            return await self._forward(call, protocol, writer)
        except asyncio.CancelledError:
            if not call.finished:
                call.usage_missing = call.metered and call.sent
                call.error = "cut short: the attempt was closed while the call was in flight"
                self._finish(call, call.status or 499)
            raise

    async def _forward(self, call: _Call, protocol: WireProtocol | None,
                       writer: asyncio.StreamWriter) -> bool:
        attempt, request = call.attempt, call.request
        prepared = call.prepared
        call.forwarded = True
        if protocol is not None and prepared is not None:
            method, path, body = "POST", protocol.upstream_path, prepared.body
        else:
            method, path, body = "GET", "/models", b""
        allowed = FORWARDED_HEADERS[attempt.protocol]
        headers = [(k, v) for k, v in request.headers.items() if k in allowed]
        key = attempt.upstream.api_key.reveal()
        if attempt.protocol == "anthropic":
            headers.append(("x-api-key", key))
            if "anthropic-version" not in request.headers:
                headers.append(("anthropic-version", ANTHROPIC_VERSION))
        else:
            headers.append(("Authorization", f"Bearer {key}"))
        headers.append(("Accept-Encoding", "identity"))
        if body and "content-type" not in request.headers:
            headers.append(("Content-Type", "application/json"))
        # its turn at the upstream: this attempt's cap on calls in flight, and round-robin
        # across attempts while the upstream is saturated
        call.slot = await attempt.gate.acquire(attempt.attempt_id)
        try:
            return await self._send_upstream(call, protocol, writer, method, path, headers,
                                             body, key)
        finally:
            attempt.gate.release(call.slot)

    async def _send_upstream(self, call: _Call, protocol: WireProtocol | None,
                             writer: asyncio.StreamWriter, method: str, path: str,
                             headers: list[tuple[str, str]], body: bytes, key: str) -> bool:
        attempt, request = call.attempt, call.request
        keep = request.keep_alive
        prepared = call.prepared
        call.sent = True  # from here on the upstream may be working on it (and billing)
        try:
            upstream = await attempt.pool.request(method, path + call.query, headers, body)
        except TransportError as exc:
            call.unreachable = exc.fatal
            call.sent = not exc.fatal
            call.usage_missing = call.metered and call.sent
            call.error = str(exc)
            status, out = _error(502, f"assay gateway: {exc}", "upstream_error",
                                 "upstream_unreachable" if exc.fatal else "upstream_error",
                                 error_shape(request.path))
            self._finish(call, status)
            return await _send(writer, status, _JSON, out, keep)
        call.upstream_status = upstream.status
        if upstream.status in THROTTLED and call.slot is not None:
            attempt.gate.throttled(upstream.header("retry-after"))
            call.throttled_by = call.slot.throttled_by()
        passed = [(k, v) for k, v in upstream.headers if k.lower() not in _NOT_RETURNED]
        ok = 200 <= upstream.status < 300
        try:
            streaming = (protocol is not None and call.stream and ok and "text/event-stream"
                         in upstream.header("content-type"))
            if streaming:
                assert protocol is not None and prepared is not None
                return await self._relay_stream(call, protocol.meter(prepared), upstream,
                                                passed, writer)
            try:
                data = await upstream.read()
            except TransportError as exc:
                call.usage_missing = call.metered and ok
                call.error = str(exc)
                status, out = _error(502, f"assay gateway: {exc}", "upstream_error",
                                     "upstream_error", error_shape(request.path))
                self._finish(call, status)
                return await _send(writer, status, _JSON, out, keep)
            if not ok:  # the upstream's own words on why, for the ledger row
                call.error = error_excerpt(upstream.status, data, (key,))
            if protocol is not None and call.attempt.transcript is not None:
                call.response, call.response_note = plain_response(data)
            if protocol is not None and ok:
                payload = parse_json(data)
                call.outcome = protocol.read_answer(payload)
                call.usage_missing = _usage_missing(call)
            self._finish(call, upstream.status)
            return await _send(writer, upstream.status, passed, data, keep)
        finally:
            upstream.aclose()

    async def _relay_stream(self, call: _Call, meter: Any, upstream: Any,
                            passed: list[tuple[str, str]], writer: asyncio.StreamWriter) -> bool:
        """Hand each SSE event on as it arrives. The ledger row, and so the budget, is settled
        before the agent sees ``[DONE]``, so its next call already meets the new totals."""
        call.status = upstream.status
        writer.write(response_head(upstream.status, passed, length=None,
                                   close=not call.request.keep_alive))
        if call.attempt.transcript is not None:
            call.collector = StreamCollector(call.attempt.protocol)
        try:
            async for piece in upstream.iter_body():
                if call.collector is not None:
                    call.collector.feed(piece)
                out = meter.feed(piece)
                if meter.done and not call.finished:
                    call.outcome = meter.outcome()
                    call.usage_missing = _usage_missing(call)
                    self._finish(call, upstream.status)
                if out:
                    writer.write(chunk(out))
                    await writer.drain()
                if meter.pending() > MAX_EVENT:
                    raise TransportError(f"an event of the stream is over {MAX_EVENT} bytes")
            rest = meter.flush()
            if rest:
                writer.write(chunk(rest))
        except TransportError as exc:
            if not call.finished:
                call.outcome = meter.outcome()
                call.usage_missing = _usage_missing(call)
                call.error = f"{exc} (after the stream had started)"
                self._finish(call, upstream.status)
            return False  # the agent sees the stream end without its last chunk
        except (ConnectionError, OSError):
            if not call.finished:
                call.outcome = meter.outcome()
                call.usage_missing = _usage_missing(call)
                call.error = "the agent closed the connection during the stream"
                self._finish(call, upstream.status)
            return False
        if not call.finished:
            call.outcome = meter.outcome()
            call.usage_missing = _usage_missing(call)
            self._finish(call, upstream.status)
        writer.write(LAST_CHUNK)
        await writer.drain()
        return call.request.keep_alive

    def _finish(self, call: _Call, status: int) -> None:
        """Count the call against its budget and append its ledger row (once)."""
        if call.finished:
            return
        call.finished = True
        call.status = status
        attempt = call.attempt
        outcome = call.outcome
        slot = call.slot
        usage = outcome.usage if outcome else None
        ok = call.upstream_status is not None and 200 <= call.upstream_status < 300
        step = bool(outcome and outcome.step and ok)
        if call.metered and (ok or call.usage_missing):
            cost = call_cost(usage, attempt.budget.price)
        else:
            cost = 0.0  # refused, not metered, or an HTTP error answer: nothing billed
        reached = self.book.charge(attempt, usage, cost, metered=call.metered, step=step,
                                   usage_missing=call.usage_missing,
                                   unreachable=call.unreachable)
        # A plain dict in ModelCall's field order (validating each row would cost more than
        # the rest of the call; the tests read every row back through ModelCall).
        row = {
            "time": call.at, "latency_ms": round((time.perf_counter() - call.started) * 1000, 3),
            "attempt_id": attempt.attempt_id, "seq": call.seq, "endpoint": call.endpoint,
            "protocol": attempt.protocol,
            "status": status, "upstream_status": call.upstream_status,
            "forwarded": call.forwarded, "stream": call.stream, "model_asked": call.model_asked,
            "model_upstream": call.model_upstream,
            "model_served": outcome.model_served if outcome else None,
            "request_sha256": hashlib.sha256(call.request.body).hexdigest(),
            "request_bytes": len(call.request.body),
            "input_tokens": usage.input if usage else None,
            "cached_input_tokens": usage.cached_input if usage else None,
            "cache_write_input_tokens": usage.cache_write if usage else None,
            "output_tokens": usage.output if usage else None,
            "reasoning_tokens": usage.reasoning if usage else None,
            "usage_missing": call.usage_missing, "cost_usd": cost, "assistant_step": step,
            "finish_reason": outcome.finish_reason if outcome else None,
            "exhausted": call.exhausted or reached, "upstream_unreachable": call.unreachable,
            "error": _scrub(call.error, attempt.upstream.api_key),
            "transcript": self._transcribe(call, status),
            "queued_ms": round(slot.waited * 1000, 3) if slot is not None else None,
            "own_in_flight": slot.own if slot is not None else None,
            "upstream_in_flight": slot.total if slot is not None else None,
            "throttled_by": call.throttled_by,
        }
        attempt.ledger.append(row)

    def _transcribe(self, call: _Call, status: int) -> str | None:
        """Write the call's bodies to the attempt's transcript; what the ledger row says of
        them (None for a call that is no model call: ``models``, an unknown route)."""
        attempt = call.attempt
        if call.prepared is None:
            return None
        if attempt.transcript is None:
            return "off"
        response, note = call.response, call.response_note
        if call.collector is not None:
            response, note = call.collector.result()
        if call.error and response is None:
            note = f"{note}; {call.error}" if note else call.error
        try:
            return attempt.transcript.record(
                seq=call.seq, time=call.at, endpoint=call.endpoint, protocol=attempt.protocol,
                request_body=call.request.body, response=response, response_note=note,
                status=status)
        except (OSError, ValueError, RecursionError):
            # a full disk, or an answer nested too deep to write again, costs the transcript,
            # never the call (nor its ledger row)
            return "failed"


@dataclass
class _Call:
    """One call in progress: what its ledger row will say."""

    attempt: _Attempt
    request: Request
    at: str = field(default_factory=_now)
    started: float = field(default_factory=time.perf_counter)
    seq: int = 0
    endpoint: str = ""
    status: int | None = None
    upstream_status: int | None = None
    forwarded: bool = False
    # a model call (priced, counted); False for /v1/models and unknown routes
    metered: bool = False
    # the request reached the upstream, so tokens may have been spent
    sent: bool = False
    stream: bool = False
    model_asked: str | None = None
    model_upstream: str | None = None
    prepared: Prepared | None = None
    outcome: Outcome | None = None
    usage_missing: bool = False
    unreachable: bool = False
    exhausted: LimitName | None = None
    error: str | None = None
    finished: bool = False
    # the query string forwarded upstream, "?..." or ""
    query: str = ""
    # what the transcript keeps of the answer: a plain answer's JSON, or a stream's pieces
    response: Any = None
    response_note: str | None = None
    collector: StreamCollector | None = None
    # its turn at the upstream (``gateway_fair``), once it had one
    slot: Slot | None = None
    throttled_by: ThrottledBy | None = None


def _connection_ceiling() -> int:
    """Half the soft descriptor limit (at least 64), or 65536 when there is no limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, soft // 2) if soft > 0 else 65536


def _usage_missing(call: _Call) -> bool:
    """A model call whose answer reported no usage, or not both its input and output."""
    usage = call.outcome.usage if call.outcome else None
    return call.metered and (usage is None or not usage.complete)


def _tokens_of(headers: dict[str, str]) -> list[str]:
    """Every credential the request carries: a bearer token, ``x-api-key``, ``api-key``."""
    out = []
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        out.append(auth[7:].strip())
    out += [v for v in (headers.get("x-api-key"), headers.get("api-key")) if v]
    return out


_QUERY_VALUE = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


def _query(raw: str, allowed: frozenset[str]) -> tuple[str, str | None]:
    """The query string to forward (re-encoded, "?..." or "") and a problem, if the request
    has a parameter the API does not define for its route, or a value that is not a plain
    word (the defined ones are booleans, numbers and ids)."""
    if not raw:
        return "", None
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return "", "malformed query string"
    for name, value in pairs:
        if name not in allowed:
            defined = ", ".join(sorted(allowed)) or "none"
            return "", (f"query parameter {name[:60]!r} is not part of this API "
                        f"(defined here: {defined})")
        if not _QUERY_VALUE.fullmatch(value):
            return "", f"query parameter {name!r} has a value that is not a plain word"
    return "?" + urlencode(pairs), None


def _scrub(text: str | None, key: Secret) -> str | None:
    return text.replace(key.reveal(), "***") if text else text


async def _send(writer: asyncio.StreamWriter, status: int, headers: list[tuple[str, str]],
                body: bytes, keep_alive: bool) -> bool:
    writer.write(response_head(status, headers, length=len(body), close=not keep_alive) + body)
    await writer.drain()
    return keep_alive

