"""``assay env build|pull|ls|rm``: pinned environments in the image store."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from assay.cli.app import app, err, fail, out
from assay.errors import AssayError

env_app = typer.Typer(no_args_is_help=True,
                      help="Pinned environments: build or import images, list, remove, open a "
                      "shell in a task's.")
app.add_typer(env_app, name="env")


def _build_args(values: list[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise fail(f"--build-arg {value!r}: expected NAME=VALUE")
        parsed[key] = rest
    return parsed


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """An assay error as its one-line message and exit code (2 input, 3 infrastructure)."""
    try:
        yield
    except AssayError as exc:
        raise fail(escape(str(exc)), exc.exit_code) from None


def _size(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 2**10:,.0f} KiB"


@env_app.command("build")
def env_build(
    source: Annotated[Path, typer.Argument(metavar="RECIPE|DOCKERFILE|ARCHIVE",
                                           help="A recipe file (env.yaml), a Dockerfile, an "
                                           "OCI layout folder, an OCI tar or a docker save "
                                           "archive.")],
    build_arg: Annotated[list[str] | None, typer.Option(
        "--build-arg", metavar="NAME=VALUE", help="A Dockerfile ARG value (repeatable).")] = None,
    expect: Annotated[str | None, typer.Option(
        "--expect", metavar="DIGEST", help="Refuse a result whose digest differs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the image record as JSON "
                                          "(progress still goes to stderr).")] = False,
    approximate_base: Annotated[bool, typer.Option(
        "--approximate-base", help="A Dockerfile whose FROM image cannot be pulled: build on "
        "the Debian release that stands for it (recorded in substitutions) instead of "
        "refusing.")] = False,
) -> None:
    """Build or import an image into the store (a source seen before is a lookup); progress
    lines go to stderr, the image's digest to stdout. A Dockerfile builds on its FROM image,
    pulled."""
    from assay.api.environments import build_environment
    from assay.cli.check_progress import timed

    args = _build_args(build_arg or [])
    with _errors():
        result = build_environment(source, build_args=args, expected_digest=expect,
                                   approximate_base=approximate_base,
                                   progress=timed(lambda line: err.print(
                                       f"[dim]{escape(line)}[/]", highlight=False)))
    image = result.image
    if as_json:
        record = json.loads(image.model_dump_json(by_alias=True))
        record["cached"] = result.cached
        out.print_json(data=record)
        return
    for text in image.substitutions:
        err.print(f"[yellow]substituted:[/] {escape(text)}", highlight=False)
    for text in image.notes:
        err.print(f"note: {escape(text)}", highlight=False)
    how = {True: "cached", False: "built", None: "imported"}[result.cached]
    err.print(f"{how}: {image.source_label or source} -> {image.files:,} files, "
              f"{_size(image.bytes)}", highlight=False)
    out.print(image.digest, highlight=False, soft_wrap=True)


@env_app.command("pull")
def env_pull(
    reference: Annotated[str, typer.Argument(
        metavar="REF", help="REGISTRY/NAME@sha256:DIGEST (or :TAG, resolved once and "
        "printed; in NAME:TAG@sha256:DIGEST the digest decides).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the image record and both "
                                          "digests as JSON (progress still goes to "
                                          "stderr).")] = False,
) -> None:
    """Pull an image from a registry into the store with skopeo (no daemon; your auth files,
    credential helpers and registries.conf apply), this machine's platform from a
    multi-platform index. Progress goes to stderr (what it fetches, then bytes arrived and an
    ETA every few seconds, then each layer unpacked); the root filesystem's digest to stdout."""
    from assay.api.environments import pull_environment
    from assay.cli.check_progress import timed

    with _errors():
        result = pull_environment(reference, progress=timed(lambda line: err.print(
            f"[dim]{escape(line)}[/]", highlight=False, soft_wrap=True)))
    image = result.image
    if as_json:
        record = json.loads(image.model_dump_json(by_alias=True))
        record.update(cached=result.cached, reference=result.reference,
                      pinned_digest=result.pinned_digest,
                      manifest_digest=result.manifest_digest)
        out.print_json(data=record)
        return
    if result.resolved_tag is not None and "@" not in reference:
        err.print(f"unpinned: the tag {result.resolved_tag!r} resolved to "
                  f"{result.pinned_digest}; pin it as {reference.rsplit(':', 1)[0]}@"
                  f"{result.pinned_digest}", highlight=False, soft_wrap=True)
    how = "cached" if result.cached else "pulled"
    err.print(f"{how}: {escape(result.reference)} (manifest {result.manifest_digest}) -> "
              f"{image.files:,} files, {_size(image.bytes)}", highlight=False, soft_wrap=True)
    out.print(image.digest, highlight=False, soft_wrap=True)


@env_app.command("ls")
def env_ls(
    as_json: Annotated[bool, typer.Option("--json", help="Every image record as a JSON "
                                          "list.")] = False,
) -> None:
    """The images in the store: digest, source, size, when it was made."""
    from rich.table import Table

    from assay.api.environments import list_environments, short_digest, store_root

    images = list_environments()
    if as_json:
        out.print_json(data=[json.loads(i.model_dump_json(by_alias=True)) for i in images])
        return
    if not images:
        err.print(f"no images in {store_root()}", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("digest", "source", "label", "size", "created"):
        if column == "label":  # long labels fold onto more lines rather than lose their end
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, no_wrap=True)
    for i in images:
        table.add_row(short_digest(i.digest), i.source_kind, escape(i.source_label),
                      _size(i.bytes), i.created_at)
    out.print(table)


@env_app.command("rm")
def env_rm(
    digest: Annotated[str, typer.Argument(metavar="DIGEST", help="A digest or a unique prefix "
                                          "of one (sha256: optional).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the removed image's record "
                                          "as JSON.")] = False,
) -> None:
    """Remove one image from the store."""
    from assay.api.environments import remove_environment

    with _errors():
        image = remove_environment(digest)
    if as_json:
        out.print_json(data=json.loads(image.model_dump_json(by_alias=True)))
        return
    out.print(f"removed {image.digest}", highlight=False, soft_wrap=True)
