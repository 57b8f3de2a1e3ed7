"""The OpenAI client put beside an agent, as ``pip install --target DIR openai`` would.

``examples/agents/my_agent.py`` runs on the sandbox's system ``python3``, which has no OpenAI
client; a user installs it into ``examples/agents/vendor`` with pip. The tests copy the same
distributions from this virtualenv instead (what pip would fetch, already here; no network, and
no second download a run): ``openai`` and the closure of its requirements, each top-level
package or module with its compiled bytecode (times kept, so the bytecode stays valid) and
its ``.dist-info`` (read by ``importlib.metadata`` at import).
"""

from __future__ import annotations

import importlib.metadata as md
import shutil
from pathlib import Path

from packaging.requirements import Requirement


def _closure(name: str) -> dict[str, md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    todo = [name]
    while todo:
        n = todo.pop()
        key = n.lower().replace("_", "-")
        if key in seen:
            continue
        dist = md.distribution(n)
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def vendor_openai(dest: Path) -> Path:
    """Copy ``openai`` and what it needs into ``dest`` (made); returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for dist in _closure("openai").values():
        tops = {str(f).split("/")[0] for f in dist.files or []}
        for top in sorted(tops):
            if top in ("..", "__pycache__", "bin"):
                continue
            src = Path(str(dist.locate_file(top)))
            if src.is_dir():
                shutil.copytree(src, dest / top, dirs_exist_ok=True)
            elif src.is_file():
                shutil.copy2(src, dest / top)
    return dest
