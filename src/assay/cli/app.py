"""What every command shares: the Typer app, the two consoles, and the one way to fail.

Exit codes: 0 done; 2 bad input (nothing was run, no run directory left behind); 3 the run
finished but some cases ended in infra errors (resume with the same ``--out``); 130 interrupted.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from assay.errors import (
    EXIT_BAD_INPUT,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Evidence-first evals of models and coding agents on your own tasks.")
# Piped output (CI logs, `| tee`) gets 120 columns instead of rich's 80, so report tables stay
# one line a row; a terminal or an explicit COLUMNS decides for itself.
_LOG_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120
out = Console(width=_LOG_WIDTH)
err = Console(stderr=True, width=_LOG_WIDTH)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    err.print(f"[bold red]assay:[/] {message}", highlight=False)
    return typer.Exit(code)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _resolve_endpoint(model: str | None, base_url: str | None, api_key_env: str | None,
                      is_builtin_ok: bool = True) -> tuple[str, str | None, str, str | None]:
    """(model, base_url, api_key, key source) from flags first, then the MODEL_* variables."""
    model = model or os.environ.get("MODEL_NAME")
    if not model:
        raise fail("no model: pass --model or set MODEL_NAME (or use --model builtin/baseline)")
    from assay.models.builtin import BUILTIN_PREFIX

    if model.startswith(BUILTIN_PREFIX) and is_builtin_ok:
        if base_url:  # two contradicting endpoints: which one was meant is not ours to guess
            raise fail(f"--base-url {base_url} and --model {model}: a built-in model is served "
                       "by assay itself, not at a URL; drop --base-url, or name the "
                       "endpoint's model with --model")
        if os.environ.get("MODEL_BASE_URL"):
            err.print(f"note: {model} is served by assay itself; MODEL_BASE_URL "
                      f"({os.environ['MODEL_BASE_URL']}) is not used", highlight=False)
        return model, None, "", None
    base_url = base_url or os.environ.get("MODEL_BASE_URL")
    if not base_url:
        raise fail("no endpoint: pass --base-url or set MODEL_BASE_URL "
                   "(e.g. http://localhost:8000/v1 for vLLM, http://localhost:11434/v1 for Ollama)")
    key_source = api_key_env or "MODEL_API_KEY"
    key = os.environ.get(key_source)
    if api_key_env and key is None:
        raise fail(f"--api-key-env {api_key_env}: that environment variable is not set")
    if key is None:
        err.print("[dim]no MODEL_API_KEY set: sending a placeholder key (fine for local "
                  "servers)[/]")
        key_source = None
    return model, base_url, key or "", key_source


def _require_sandbox(sandbox: str) -> None:
    if sandbox not in ("bwrap", "none"):
        raise fail("--sandbox must be bwrap or none")
    if sandbox == "none":
        err.print("[bold red]NOT ISOLATED:[/] candidate code runs without the sandbox "
                  "(--sandbox none)")
        return
    from assay.sandbox import SandboxUnavailable, check_bwrap

    try:
        check_bwrap()
    except SandboxUnavailable as exc:
        raise fail(f"the sandbox cannot run here: {exc}\nInstall bubblewrap, or pass "
                   "--sandbox none to run candidate code NOT ISOLATED.") from None
