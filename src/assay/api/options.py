"""What a caller may set on a run, and where every value comes from when they do not.

One table for the CLI and for Python callers, so the same inputs make the same run: a narrow
suite's ``temperature``, ``repeats`` and ``max_tokens`` come from its ``suite.yaml``; everything
else from the defaults below; the caller's overrides win over both. A name not in the table is
refused rather than ignored: a misspelt ``temprature=0.7`` must not run a whole suite at 0.

This module imports nothing heavy: the CLI reads its flag defaults from here at start-up, and
the bounds of its flags (``suites/limits.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from assay.errors import InputError
from assay.suites.limits import MAX_CONCURRENCY, PLAN_TRIALS_DEFAULT_MAX, clock_text, eta_text

# Defaults of both kinds (a narrow suite's temperature/repeats/max_tokens come from suite.yaml).
SHARED_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "concurrency": 16,  # requests in flight
    "timeout": 120.0,  # seconds per request
    "max_tries": 5,  # transport tries per request
})
# Defaults of coding runs: tasks.jsonl has no settings of its own.
CODING_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "temperature": 0.2,
    "samples": 3,  # answers per task
    "sandbox": "bwrap",  # or "none": candidate code runs NOT ISOLATED
    "exec_timeout": 30.0,  # seconds per sandboxed execution
    "memory_mib": 1024,
    "pids": 256,
})

ENDPOINT_OPTIONS = ("base_url", "api_key", "api_key_env")
SHARED_OPTIONS = ("temperature", "max_tokens", "concurrency", "timeout", "max_tries")
NARROW_OPTIONS = ("repeats", "split")
CODING_OPTIONS = ("samples", "sandbox", "exec_timeout", "memory_mib", "pids")

# Which run options each suite kind takes (the endpoint options apply to both).
RUN_OPTIONS: Mapping[str, frozenset[str]] = MappingProxyType({
    "narrow": frozenset(ENDPOINT_OPTIONS + SHARED_OPTIONS + NARROW_OPTIONS),
    "coding": frozenset(ENDPOINT_OPTIONS + SHARED_OPTIONS + CODING_OPTIONS),
})


def _positive_int(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1
    return None if ok else "must be an integer of at least 1"


def _positive_number(v: Any) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v > 0
    return None if ok else "must be a number above 0"


def _temperature(v: Any) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
    return None if ok else "must be a number of at least 0"


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) else "must be a string"


def _sandbox(v: Any) -> str | None:
    return None if v in ("bwrap", "none") else "must be 'bwrap' or 'none'"


_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "base_url": _text, "api_key": _text, "api_key_env": _text,
    "temperature": _temperature, "max_tokens": _positive_int, "concurrency": _positive_int,
    "timeout": _positive_number, "max_tries": _positive_int,
    "repeats": _positive_int, "split": _text,
    "samples": _positive_int, "sandbox": _sandbox, "exec_timeout": _positive_number,
    "memory_mib": _positive_int, "pids": _positive_int,
}


def check_overrides(kind: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides that were given (``None`` means "not given"), checked; every bad name or
    value is named in one :class:`InputError`, so a caller fixes them all at once."""
    known = RUN_OPTIONS[kind]
    every = RUN_OPTIONS["narrow"] | RUN_OPTIONS["coding"]
    unknown = sorted(k for k in overrides if k not in every)
    other = sorted(k for k in overrides if k in every and k not in known
                   and overrides[k] is not None)
    problems: list[str] = []
    if unknown:
        problems.append(f"unknown run option(s): {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(every))})")
    if other:
        problems.append(f"{', '.join(other)}: not an option of {kind} suites")
    given = {k: v for k, v in overrides.items() if k in known and v is not None}
    for name, value in given.items():
        problem = _CHECKS[name](value)
        if problem:
            problems.append(f"{name}={value!r}: {problem}")
    if problems:
        raise InputError("; ".join(problems))
    return given


@dataclass(frozen=True)
class Endpoint:
    """Where a model is asked: ``base_url`` None for a built-in model (assay serves it). The
    key itself is never recorded, only ``api_key_env``, the variable it came from. ``notes``
    are what a person should see before the run (an endpoint variable not used, a
    placeholder key)."""

    base_url: str | None
    api_key: str = field(repr=False)
    api_key_env: str | None
    notes: tuple[str, ...] = ()


def _python_option(name: str, value: str | None = None) -> str:
    return f"{name}=" if value is None else f"{name}={value!r}"


def cli_option(name: str, value: str | None = None) -> str:
    """How the command line spells an option: ``--base-url URL``."""
    flag = "--" + name.replace("_", "-")
    return flag if value is None else f"{flag} {value}"


def resolve_endpoint(model: str, given: Mapping[str, Any], *, builtin: bool,
                     environ: Mapping[str, str] = os.environ,
                     spell: Callable[..., str] = _python_option) -> Endpoint:
    """The endpoint for ``model``, one rule for the CLI and for Python: the caller's
    ``base_url`` / ``api_key`` / ``api_key_env`` first, then ``MODEL_BASE_URL`` and
    ``MODEL_API_KEY``. A built-in model takes none of them (given, they contradict it;
    ``MODEL_BASE_URL`` in the environment is noted as unused). No key at all sends a
    placeholder (local servers need none), noted. ``spell`` writes an option's name as the
    caller typed it (``base_url=`` here, :func:`cli_option` for the command line)."""
    if builtin:
        if given.get("base_url") is not None:  # two contradicting endpoints: not ours to guess
            raise InputError(f"{spell('base_url', given['base_url'])} and "
                             f"{spell('model', model)}: a built-in model is served by assay "
                             f"itself, not at a URL; drop {spell('base_url')}, or name the "
                             f"endpoint's model with {spell('model')}")
        extra = [spell(k) for k in ENDPOINT_OPTIONS if given.get(k) is not None]
        if extra:
            raise InputError(f"{model} is served by assay itself: {', '.join(extra)} "
                             "do not apply")
        notes: tuple[str, ...] = ()
        if environ.get("MODEL_BASE_URL"):
            notes = (f"note: {model} is served by assay itself; MODEL_BASE_URL "
                     f"({environ['MODEL_BASE_URL']}) is not used",)
        return Endpoint(None, "", None, notes)
    base_url = given.get("base_url") or environ.get("MODEL_BASE_URL")
    if not base_url:
        raise InputError(f"no endpoint for {model!r}: pass {spell('base_url')} or set "
                         "MODEL_BASE_URL (e.g. http://localhost:8000/v1 for vLLM, "
                         "http://localhost:11434/v1 for Ollama)")
    key_env: str | None = given.get("api_key_env")
    if given.get("api_key") is not None:
        return Endpoint(base_url, given["api_key"], key_env)
    if key_env is not None:
        if key_env not in environ:
            raise InputError(f"{spell('api_key_env', key_env)}: that environment variable is "
                             "not set")
        return Endpoint(base_url, environ[key_env], key_env)
    if "MODEL_API_KEY" in environ:
        return Endpoint(base_url, environ["MODEL_API_KEY"], "MODEL_API_KEY")
    return Endpoint(base_url, "", None, ("no MODEL_API_KEY set: sending a placeholder key "
                                         "(fine for local servers)",))


# clock_text, eta_text: how every progress line says a time and the time left (the CLI's lines
# and env pull's alike)
__all__ = ["CODING_DEFAULTS", "Endpoint", "MAX_CONCURRENCY", "PLAN_TRIALS_DEFAULT_MAX",
           "RUN_OPTIONS", "SHARED_DEFAULTS", "check_overrides", "clock_text", "cli_option",
           "eta_text", "resolve_endpoint"]
