"""``assay env shell TASK``: the command; the sandboxed shell itself is ``api.env_shell``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from assay.cli.envs import env_app


@env_app.command("shell")
def env_shell(
    task: Annotated[Path, typer.Argument(help="A task bundle (the folder with task.yaml).")],
    network: Annotated[bool, typer.Option(
        "--network/--no-network",
        help="Share the host's network (off by default, as in a trial).")] = False,
) -> None:
    """An interactive shell in the task's environment, its starting tree as the workspace."""
    from assay.api.env_shell import open_env_shell

    raise typer.Exit(open_env_shell(task, network=network))
