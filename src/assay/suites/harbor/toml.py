"""Reading a Harbor task's ``task.toml`` so that every problem names its file, line and field.

Only the fields the import carries over (or must refuse) are typed; Harbor itself ignores keys
it does not know, so unknown keys are listed for the import record rather than rejected.
``tomllib`` gives a line only for syntax errors, so the lines of keys are found by a small scan
of the text (section headers and ``key =`` lines), enough to point an editor at a bad value.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from assay.suites.errors import Problem, SuiteError
from assay.suites.limits import TASK_FILE_MAX_BYTES
from assay.suites.textfile import read_text

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])B?\s*$", re.IGNORECASE)


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class HarborVerifier(_Section):
    timeout_sec: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None


class HarborAgent(_Section):
    timeout_sec: float | None = Field(default=None, gt=0)
    user: str | int | None = None


class HarborEnvironment(_Section):
    build_timeout_sec: float = Field(default=600.0, gt=0)
    docker_image: str | None = None
    cpus: float = Field(default=1, gt=0)
    memory_mb: int | None = Field(default=None, ge=16)
    storage_mb: int | None = Field(default=None, gt=0)
    memory: str | None = None
    storage: str | None = None
    gpus: int = Field(default=0, ge=0)
    allow_internet: bool = True
    network_mode: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    mcp_servers: list[Any] = Field(default_factory=list)

    @field_validator("memory", "storage")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None and not _SIZE.match(v):
            raise ValueError("expected a size like '512M' or '4G'")
        return v

    def memory_mib(self) -> int:
        """Harbor's ``memory_mb``, else its older ``memory`` string, else its default 2048."""
        if self.memory_mb is not None:
            return self.memory_mb
        if self.memory is not None:
            return size_mib(self.memory)
        return 2048


class HarborPackage(_Section):
    name: str | None = None
    description: str = ""


class HarborTaskToml(_Section):
    """``task.toml``; ``version`` is the older spelling of ``schema_version``."""

    schema_version: str | None = None
    version: str | None = None
    task: HarborPackage | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: HarborVerifier = Field(default_factory=HarborVerifier)
    agent: HarborAgent = Field(default_factory=HarborAgent)
    environment: HarborEnvironment = Field(default_factory=HarborEnvironment)
    solution: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    steps: list[Any] | None = None

    def unknown_keys(self) -> list[str]:
        """Keys Harbor's own reader would ignore too: listed, never an error."""
        out = [k for k in (self.model_extra or {})]
        for name in ("verifier", "agent", "environment", "task"):
            section = getattr(self, name)
            if section is not None:
                out += [f"{name}.{k}" for k in (section.model_extra or {})]
        return sorted(out)


def size_mib(text: str) -> int:
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    value, unit = float(m.group(1)), m.group(2).upper()
    return int(value * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit])


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line of every ``[section]`` and ``key =`` by its dotted path (quotes dropped)."""
    lines: dict[tuple[str, ...], int] = {}
    section: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines(), start=1):
        head = _HEADER.match(line)
        if head:
            section = tuple(p.strip().strip("\"'") for p in head.group(1).split("."))
            lines.setdefault(section, n)
            continue
        key = _KEY.match(line)
        if key:
            path = (*section, *(p.strip().strip("\"'") for p in key.group(1).split(".")))
            lines.setdefault(path, n)
    return lines


def _line(lines: dict[tuple[str, ...], int], loc: tuple[str, ...]) -> int | None:
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def read_task_toml(path: Path) -> HarborTaskToml:
    """The parsed, validated file, or one :class:`SuiteError` with every problem in it."""
    text = read_text(path, limit=TASK_FILE_MAX_BYTES, what="task.toml")[1]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = int(m.group(1)) if m else None
        raise SuiteError.one(path, f"invalid TOML: {msg}", line=line) from exc
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, deep nesting
        raise SuiteError.one(path, f"invalid TOML: {exc or 'nested too deeply'}") from None
    try:
        return HarborTaskToml.model_validate(data)
    except ValidationError as exc:
        lines = key_lines(text)
        problems = []
        for e in exc.errors():
            loc = tuple(str(x) for x in e["loc"])
            problems.append(Problem(path, _line(lines, loc), ".".join(loc) or None, e["msg"]))
        raise SuiteError(problems) from exc
