"""The reference page of every record a run writes, generated from the record models.

``docs/records.md`` is this module's output, checked by a test to be current, so a user can
read any file in a run directory without reading the code, and the page can never drift from
what the writers validate against. Regenerate it with::

    .venv/bin/python -m assay.records.docs > docs/records.md
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
from typing import Any

from pydantic import BaseModel

import assay.records as records_pkg
from assay.records.base import REGISTRY, Record


def _load_all() -> list[type[Record]]:
    for info in pkgutil.iter_modules(records_pkg.__path__):
        if info.name not in ("docs",):
            importlib.import_module(f"assay.records.{info.name}")
    seen: set[str] = set()
    out = []
    for cls in REGISTRY:
        if not cls.__module__.startswith("assay."):
            continue  # a record some test or user code declared: not assay's own
        key = cls.schema_id()
        if key not in seen:
            seen.add(key)
            out.append(cls)
    return sorted(out, key=lambda c: c.schema_name)


def _type_name(annotation: Any) -> str:
    text = str(annotation) if not isinstance(annotation, type) else annotation.__name__
    text = re.sub(r"\btyping\.", "", text)
    text = re.sub(r"<class '([\w.]+)'>", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = re.sub(r"\b(?:[a-z_]+\.)+([A-Z]\w*)", r"\1", text)
    return text.replace("NoneType", "None")


def _nested(annotation: Any) -> list[type[BaseModel]]:
    found = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append(annotation)
    for arg in typing.get_args(annotation):
        found += _nested(arg)
    return found


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or "").replace("\n", " ")


def _table(cls: type[BaseModel]) -> list[str]:
    lines = ["| field | type | meaning |", "|---|---|---|"]
    for name, info in cls.model_fields.items():
        shown = info.alias or name
        desc = (info.description or "").replace("\n", " ").replace("|", "\\|")
        desc = re.sub(r"\s+", " ", desc).strip()
        kind = _type_name(info.annotation).replace("|", "\\|")
        lines.append(f"| `{shown}` | `{kind}` | {desc} |")
    return lines


def render() -> str:
    out = ["# Records: what every file in a run directory holds", "",
           "Generated from the record models in `src/assay/records/` by "
           "`python -m assay.records.docs`; a test keeps it current. Whole files carry their "
           "schema id in a `schema` field; JSONL rows carry none each, and the run's "
           "`manifest.json` names their schema under `record_schemas`. A record written by a "
           "newer assay (a higher version of the same schema) is refused with a clear error. "
           "A JSONL file's last line cut short by a kill is never counted as a row and never "
           "dropped in silence: every reader reports it (file and line), the model-call "
           "ledger counts it as a call with unknown usage, and a writer that continues such a "
           "file first keeps the cut bytes in `<file>.torn.jsonl` (time, byte offset, length, "
           "text).", ""]
    for cls in _load_all():
        out += [f"## `{cls.schema_id()}`" + (f" — `{cls.file}`" if cls.file else ""), "",
                _doc(cls), ""]
        out += _table(cls)
        out.append("")
        done: set[type] = {cls}
        pending = [n for f in cls.model_fields.values() for n in _nested(f.annotation)]
        while pending:
            sub = pending.pop(0)
            if sub in done:
                continue
            done.add(sub)
            out += [f"### `{sub.__name__}` (in `{cls.schema_name}`)", "", _doc(sub), ""]
            out += _table(sub)
            out.append("")
            pending += [n for f in sub.model_fields.values() for n in _nested(f.annotation)]
    out += _interchange()
    return "\n".join(out).rstrip() + "\n"


def _interchange() -> list[str]:
    """The files written in other projects' formats: named here with the version written, so a
    reader of a run directory finds them; their fields are those formats' own."""
    from assay.records.atif import ATIF_FILE, ATIF_VERSION, MAX_ATIF_BYTES

    return [
        "## Interchange files (other projects' formats)", "",
        f"`{ATIF_FILE}` beside each attempt's `trial.json`: the trial as an ATIF trajectory "
        f"(Harbor's Agent Trajectory Interchange Format, RFC 0001), version `{ATIF_VERSION}` "
        "(`schema_version`), validated in the tests by the `atif` package's models. Written "
        "when the attempt ends and again, afresh, by `assay trial export` and `assay exp "
        "export` (`DIR/TASK/ARM/REP/aN.atif.json`). assay's identifiers and verdict are under "
        "`extra.assay`; a figure the ledger does not hold is left out with its reason in "
        "`extra`, never 0. docs/guide/interchange.md maps every field.", "",
        f"`agent/{ATIF_FILE}`: the trajectory a `command:` agent wrote itself "
        f"(`ASSAY_ATIF_PATH`), kept as written (at most {MAX_ATIF_BYTES} bytes). "
        "`trial.json`'s `execution.agent_atif` says what was found: `status` `valid` (with "
        "`file`, `schema_version`, `steps`: it is the trial's step source) or `invalid` (with "
        "`reason`, naming the field; `execution.evidence_gap` is then true and "
        "`execution.anomalies` lists `agent_atif_invalid: …`).", "",
        "An Inspect eval log (`.eval` or `.json`) is written only where `assay report RUN "
        "--inspect-log FILE` puts it, through Inspect's own log API; it is not part of the run "
        "directory.", ""]


if __name__ == "__main__":
    print(render(), end="")
