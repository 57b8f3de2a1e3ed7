"""The base of every typed record: a pydantic model with a schema name, a version, and a
docstring per field.

Records are what a reader of a run directory sees, so their shape is declared once, here and
in the modules beside this one, and shared by the writer, the reader, the tests and the
generated reference page (``docs/records.md``). A record names its schema as ``name/version``;
whole-file records carry it in a ``schema`` field, JSONL rows carry none each (it would cost a
field per row) and are named once in the run's manifest under ``record_schemas``.

Reading a record written by a newer assay (a higher version of the same schema) is a clear
``RecordError``, never a silent misreading; an older version is read as long as its fields
still validate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from assay.errors import RecordError

#: Every record class, in the order it was declared; the reference page is generated from it.
REGISTRY: list[type[Record]] = []


def parse_schema_id(value: object) -> tuple[str, int] | None:
    """``("assay.narrow.manifest", 1)`` from ``"assay.narrow.manifest/1"``; None if malformed."""
    if not isinstance(value, str) or "/" not in value:
        return None
    name, _, version = value.rpartition("/")
    if not name or not version.isdigit():
        return None
    return name, int(version)


class Record(BaseModel):
    """A record on disk. Subclasses set ``schema_name``, ``schema_version`` and ``file`` (the
    file name, or pattern, a reader finds it under) and document every field."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    schema_name: ClassVar[str] = ""
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.schema_name:
            REGISTRY.append(cls)

    @classmethod
    def schema_id(cls) -> str:
        return f"{cls.schema_name}/{cls.schema_version}"

    @classmethod
    def check_schema_id(cls, value: object, where: Path | str) -> None:
        """Refuse a record of another kind, or one written by a newer assay."""
        parsed = parse_schema_id(value)
        if parsed is None:
            raise RecordError(f"{where}: no readable schema id (expected {cls.schema_id()!r}, "
                              f"found {value!r})")
        name, version = parsed
        if name != cls.schema_name:
            raise RecordError(f"{where}: a {name!r} record, not {cls.schema_name!r}")
        if version > cls.schema_version:
            raise RecordError(f"{where}: written with schema {name}/{version}, newer than this "
                              f"assay reads ({cls.schema_id()}); upgrade assay to read it")

    @classmethod
    def read(cls, data: dict[str, Any], where: Path | str) -> Self:
        """Validate ``data`` as this record; errors name ``where`` and the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(record)"
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise RecordError(f"{where}: field {loc!r}: {first['msg']}{more}") from None

    def to_json(self) -> dict[str, Any]:
        """The record as written: unset optional fields are kept as ``null`` (unknown stays
        visible as unknown)."""
        return self.model_dump(mode="json")
