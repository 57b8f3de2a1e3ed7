"""The documentation's shape: a README that fits on a page, a guide whose index lists every page,
and links between them that lead somewhere (a file that exists, a heading that exists).

The commands the pages show are checked by tests/test_docs_commands.py; the generated references
by tests/test_reference_docs.py, tests/test_cli_reference.py and tests/test_records_docs.py.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
GUIDE = REPO / "docs" / "guide"
#: a page another piece of work writes (pinned environments, issue 23): linked before it lands,
#: checked like any other page as soon as it exists
PENDING = {GUIDE / "environments.md"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [README, *sorted(GUIDE.glob("*.md")), *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "docs" / "reference").glob("*.md"))]


def test_the_readme_fits_on_a_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/guide/"
    text = "\n".join(lines)
    for heading in ("## The two commands", "## Quick start 1: a narrow suite",
                    "## Quick start 2: a coding suite", "## Quick start 3: an A/B experiment",
                    "## Where to read on"):
        assert heading in text, heading
    assert re.search(r"^bar:", text, re.M), "the A/B quick start shows its bar"


def test_the_guide_index_lists_every_page() -> None:
    index = (GUIDE / "README.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    for page in [*sorted(GUIDE.glob("*.md")), *PENDING]:
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/guide/README.md does not link {page.name}"
            assert f"](docs/guide/{page.name})" in readme, f"README.md does not link {page.name}"


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes for a page's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    out = set()
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"#{1,6} (.*)", line)
        if match:
            words = "".join(ch for ch in match.group(1).strip().lower()
                            if ch in " -_" or unicodedata.category(ch)[0] in "LN")
            slug = words.replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_anchors_follow_githubs_rule() -> None:
    text = "# Run history and drift: `assay history`\n## Did it help? `exp plan`\n## x\n## x\n"
    assert anchors(text) == {"run-history-and-drift-assay-history", "did-it-help-exp-plan", "x",
                             "x-1"}


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_lead_somewhere(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not fetched here
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if dest in PENDING and not dest.exists():
            continue
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(
                dest.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_experiment_is_the_rehearsal_file() -> None:
    """The A/B quick start shows examples/experiments/rehearsal.yaml shortened, never changed:
    every key it shows has the file's value, and its bar is the file's whole bar."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# examples/experiments/rehearsal\.yaml.*?)```", text, re.S)
    assert block is not None, "the README's experiment example is gone"
    shown = yaml.safe_load(block.group(1))
    real = yaml.safe_load((REPO / "examples" / "experiments" / "rehearsal.yaml").read_text())
    assert shown == {k: real[k] for k in shown}
    assert set(real) - set(shown) == {"seed", "concurrency"} and "bar" in shown


@pytest.mark.parametrize(("module", "heading"), [
    ("mcode.stream", "## MiniMax Code (`agent: mcode`)"),
    ("mini_swe_agent.trajectory", "## mini-swe-agent (`agent: mini-swe-agent`)"),
    ("claude.stream", "## Claude Code (`agent: claude`)"),
    ("qwen.stream", "## Qwen Code (`agent: qwen`)"),
    ("codex.stream", "## Codex (`agent: codex`)"),
])
def test_the_agents_guide_names_every_anomaly(module: str, heading: str) -> None:
    """Each adapter's reader names the breaks it finds in a CLI's stream; the agents guide lists
    the same names in that CLI's section, so a reader of a run record can look them up."""
    import importlib

    names = importlib.import_module(f"assay.agents.{module}").ANOMALIES
    guide = (GUIDE / "agents.md").read_text(encoding="utf-8")
    section = guide[guide.index(heading):]
    section = section[:section.index("\n## ", 1)]
    missing = [name for name in names if f"`{name}`" not in section]
    assert not missing, f"{heading}: {missing}"


def test_the_security_page_states_the_limits_the_code_holds() -> None:
    """The input limits as the security guide states them are the values in
    src/assay/suites/limits.py: a changed bound without a changed page fails here."""
    from assay.suites import limits as lim

    def size(n: int) -> str:
        return "1 GiB" if n == 1024 * lim.MIB else lim.describe_bytes(n)

    text = " ".join((GUIDE / "security.md").read_text(encoding="utf-8").split())
    stated = [
        f"`experiment.yaml` {size(lim.EXPERIMENT_FILE_MAX_BYTES)};",
        f"`task.yaml` {size(lim.TASK_FILE_MAX_BYTES)};",
        f"`instruction.md` {size(lim.INSTRUCTION_FILE_MAX_BYTES)};",
        f"`suite.yaml` {size(lim.SUITE_FILE_MAX_BYTES)};",
        f"`prompts/system.txt` {size(lim.PROMPT_FILE_MAX_BYTES)};",
        f"`judge.yaml` {size(lim.JUDGE_FILE_MAX_BYTES)}, its rubric "
        f"{size(lim.RUBRIC_FILE_MAX_BYTES)}, its template {size(lim.TEMPLATE_FILE_MAX_BYTES)};",
        f"`.assay/holdout.yaml` {size(lim.HOLDOUT_FILE_MAX_BYTES)};",
        f"a `builtin/replay` script {size(lim.REPLAY_FILE_MAX_BYTES)};",
        f"a cases or tasks JSONL file {size(lim.JSONL_FILE_MAX_BYTES)}, one line of it "
        f"{size(lim.JSONL_LINE_MAX_BYTES)}.",
        f"at most {lim.YAML_MAX_NODES:,} values", f"most {lim.YAML_MAX_DEPTH} levels",
        f"An integer is at most {lim.YAML_MAX_INT_CHARS} characters",
        f"`repetitions` ≤ {lim.MAX_REPETITIONS:,};",
        f"`concurrency` and `-j` ≤ {lim.MAX_CONCURRENCY:,};",
        f"`retries.infra` ≤ {lim.MAX_INFRA_RETRIES};",
        f"`limits.tokens` ≤ 10^{len(str(lim.MAX_TOKENS_PER_ATTEMPT)) - 1} per attempt;",
        f"`limits.total_cost_usd` ≤ {lim.MAX_COST_USD:,} (finite);",
        f"`budget.agent_wall_seconds` ≤ {lim.MAX_AGENT_WALL_SECONDS // 86400} days,",
        f"`budget.verifier_wall_seconds` ≤ {lim.MAX_VERIFIER_WALL_SECONDS // 86400} day,",
        f"`budget.assistant_steps` ≤ {lim.MAX_ASSISTANT_STEPS:,}.",
        f"A plan of more than {lim.PLAN_TRIALS_DEFAULT_MAX:,} trials needs "
        f"`exp run --allow-large-plan`; none may exceed {lim.PLAN_TRIALS_CEILING:,}.",
        f"spans at most {lim.MAX_SCALE_SPAN:,} steps",
    ]
    assert lim.MAX_TOKENS_PER_ATTEMPT == 10 ** (len(str(lim.MAX_TOKENS_PER_ATTEMPT)) - 1)
    missing = [s for s in stated if s not in text]
    assert not missing, missing


def test_the_readme_lists_every_exit_code_the_code_defines() -> None:
    """Each ``EXIT_*`` of assay.errors has its row in the README's table (the table also has
    codes the code spells as literals today, such as 4)."""
    import assay.errors as errors

    text = README.read_text(encoding="utf-8")
    table = text[text.index("## Exit codes"):].split("\n## ", 1)[0]
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert codes and codes <= rows, sorted(codes - rows)


def test_the_readme_counts_what_the_examples_hold() -> None:
    """The README's quoted counts (the figures of the rehearsal are held in
    test_examples.py::test_the_rehearsal_experiment_runs_with_a_real_agent, which runs it)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    words = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
    said = re.search(r"`examples/agent-tasks` has (\w+)\.", text)
    assert said, "the README no longer says how many example bundles there are"
    bundles = [p for p in (REPO / "examples" / "agent-tasks").iterdir()
               if (p / "task.yaml").is_file()]
    assert words[said.group(1)] == len(bundles)
    said = re.search(r"`examples/triage` is (\d+) GitHub issues", text)
    assert said
    cases = (REPO / "examples" / "triage" / "data" / "cases.jsonl").read_text().splitlines()
    assert int(said.group(1)) == sum(1 for line in cases if line.strip())
