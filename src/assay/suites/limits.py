"""The bounds every hand-written input is held to, in one place (docs/guide/security.md lists them).

Why bounds at all: an experiment, a task bundle or a suite can come from a careless colleague or
from someone who wants the runner's machine down. Each file is read whole and parsed before
anything runs, so its size is bounded first (a 60 MB experiment file is refused by its size, in
a stat call, instead of being parsed for minutes); YAML's aliases are bounded by what they
expand to (a "billion laughs" file is a few hundred bytes and gigabytes once built); and the
numbers that multiply into planned work (repetitions, arms, concurrency, budgets) are bounded
so that the plan built from them is finite and fits in memory. The limits are far above what a
real file needs: reaching one is a mistake or an attack, and the message says which limit.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

#: Largest ``experiment.yaml``: a real one is a few KiB (arms, a price table, a bar).
EXPERIMENT_FILE_MAX_BYTES = 1 * MIB
#: Largest ``task.yaml`` of a bundle.
TASK_FILE_MAX_BYTES = 256 * KIB
#: Largest ``instruction.md`` (it becomes the agent's prompt; a model's context is far smaller).
INSTRUCTION_FILE_MAX_BYTES = 1 * MIB
#: Largest ``suite.yaml`` of a narrow suite (labels and a scorer).
SUITE_FILE_MAX_BYTES = 1 * MIB
#: Largest fixed system prompt of a narrow suite (``prompts/system.txt``).
PROMPT_FILE_MAX_BYTES = 1 * MIB
#: Largest ``judge.yaml``, and largest rubric and prompt template a judge names.
JUDGE_FILE_MAX_BYTES = 256 * KIB
RUBRIC_FILE_MAX_BYTES = 1 * MIB
TEMPLATE_FILE_MAX_BYTES = 256 * KIB
#: Largest Dockerfile read into a recipe (a real one is a few KiB; heredocs included).
DOCKERFILE_MAX_BYTES = 1 * MIB
#: Largest ``builtin/replay`` script file (canned model turns for rehearsals).
REPLAY_FILE_MAX_BYTES = 16 * MIB
#: Largest environment recipe (``env.yaml``): a suite, packages, steps; a real one is a few KiB.
RECIPE_FILE_MAX_BYTES = 256 * KIB
#: Largest ``.assay/holdout.yaml`` (one number).
HOLDOUT_FILE_MAX_BYTES = 64 * KIB
#: Largest cases or tasks JSONL file, and largest single line of one: read one line at a time,
#: so the line bound is what caps the memory of one parse.
JSONL_FILE_MAX_BYTES = 1024 * MIB
JSONL_LINE_MAX_BYTES = 16 * MIB

#: Steps of a rubric's integer scale ``[lo, hi]``: each score is a row of the calibration table.
MAX_SCALE_SPAN = 1000

#: Values (mappings, lists, scalars) a YAML document may hold once its aliases are expanded.
#: A plain 1 MiB file holds far fewer; a billion-laughs file blows past it at once.
YAML_MAX_NODES = 200_000
#: Nesting depth of a YAML document (the loader and the validators recurse).
YAML_MAX_DEPTH = 64
#: Characters of one YAML integer (a 64-bit number is at most 20 digits, 66 in binary).
YAML_MAX_INT_CHARS = 80

#: ``repetitions`` per (task, arm), and ``concurrency`` / ``-j`` (attempts in flight).
MAX_REPETITIONS = 10_000
MAX_CONCURRENCY = 1024
#: ``retries.infra``: every retry is another full attempt.
MAX_INFRA_RETRIES = 20
#: Trials (tasks x arms x repetitions) a run plans without ``--allow-large-plan``.
PLAN_TRIALS_DEFAULT_MAX = 10_000
#: Trials no run plans, flag or not: the plan is held in memory and in the state database.
PLAN_TRIALS_CEILING = 1_000_000
#: Budgets in task.yaml: an agent's and a verifier's wall time, the agent's steps.
MAX_AGENT_WALL_SECONDS = 7 * 24 * 3600
MAX_VERIFIER_WALL_SECONDS = 24 * 3600
MAX_ASSISTANT_STEPS = 1_000_000
#: Spending limits in an experiment file (tokens per attempt, USD per attempt and per run).
MAX_TOKENS_PER_ATTEMPT = 10**10
MAX_COST_USD = 10**7


def describe_bytes(n: int) -> str:
    """``1 MiB``, ``256 KiB``, ``17 bytes``: a size as a person reads it."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    if n >= KIB:
        return f"{n / KIB:.1f} KiB"
    return f"{n} bytes"


def clock_text(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h02m``: an elapsed time or an ETA, short enough for a log line
    (every progress line says time this way)."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta_text(elapsed: float, done: float, left: float) -> str:
    """The time ``left`` more units take at the pace of the ``done`` so far (``done`` > 0),
    as :func:`clock_text` says it: the one rule of every progress line's ETA (trials, layers,
    bytes)."""
    return clock_text(elapsed / done * left)
