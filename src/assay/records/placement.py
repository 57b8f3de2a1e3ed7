"""Where an attempt ran when it did not run in the runner's own process (``--executor ray``).

``placement.json`` is written by the driver into the attempt's directory when the worker
reports in (with ``object_store`` too: it is the driver's own file, beside the ones the worker
sends back), and rewritten once if the worker or its node is lost. It is evidence, not state:
the state database decides what the attempt is; this file says on which node it ran and, for a
lost one, what Ray reported. Local attempts have none.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from assay.records.base import Record

PLACEMENT_JSON = "placement.json"


class Placement(Record):
    """``placement.json``: the node and worker process of one remote attempt."""

    schema_name: ClassVar[str] = "assay.executor.placement"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "trials/<task>/<arm>/<rep>/<attempt>/placement.json"

    schema_: str = Field(alias="schema")
    """``assay.executor.placement/1``."""
    executor: Literal["ray"]
    """The executor that placed the attempt."""
    transfer: Literal["shared_fs", "object_store"]
    """How the attempt's files reached the run directory: written there by the worker over a
    shared file system, or carried back through Ray's object store and the executor channel
    (``--ray-transfer``; with ``auto``, what the worker chose for this attempt)."""
    node_id: str
    """Ray's id of the node the attempt ran on."""
    node_ip: str
    """That node's address as Ray knows it."""
    hostname: str
    """The worker machine's host name."""
    worker_pid: int
    """The Ray worker process that ran the attempt's stages (on that node)."""
    started_at: str
    """When the worker reported in (UTC, ISO 8601)."""
    lost_at: str | None = None
    """When the driver learned that the worker or its node was gone; None while it was not."""
    lost_error: str | None = None
    """What Ray reported for the lost attempt (error class and message, shortened); the
    attempt's state-database reason starts with ``worker_lost`` and says the same."""
