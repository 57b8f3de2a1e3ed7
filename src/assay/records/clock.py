"""The one timestamp format of every record: UTC, milliseconds, a ``Z``.

A module of its own so that code which only stamps times (the state database, which
``exp status`` opens) need not import the record models beside ``utc_now``.
"""

from __future__ import annotations

import datetime as dt


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


__all__ = ["utc_now"]
