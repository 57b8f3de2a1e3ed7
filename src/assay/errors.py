"""Every error assay raises on purpose, in one tree, so a caller catches by meaning.

The split that matters to a user is whose move it is: an ``InputError`` means the input must
change (exit 2, nothing was run or nothing was lost); an ``InfraError`` means the machine, the
endpoint or the sandbox let us down and the same command may succeed later (exit 3, resumable).
``cli.main()`` maps the tree to exit codes in one place; no builtin exception carries a domain
meaning, so an unrelated ``RuntimeError`` can never be recorded as, say, a sandbox failure.

    AssayError
    ├── InputError                 exit 2: fix the input
    │   ├── SuiteError             suites, cases, tasks, bundles: file:line:field problems
    │   ├── RunConflict            resuming a run directory with other settings
    │   ├── HoldoutExhausted       a new run would look at a holdout past its allowance
    │   ├── NotComparable          two runs that cannot be paired
    │   ├── GradingError           bad grading input (not a coding run, a bad CSV line, ...)
    │   ├── NeverOverwrite         a record that exists is never written again
    │   ├── RecordError            a record file that cannot be read (corrupt, newer schema)
    │   └── ImageRefused           an image archive or layout that is unsafe, corrupt or unknown
    └── InfraError                 exit 3: the environment failed, not the input
        ├── PullFailed             an image could not be fetched from its registry
        ├── ImageUnavailable       an image could not be placed here from another store
        ├── TransportError         the endpoint gave no usable answer within the retry budget
        ├── SandboxUnavailable     bubblewrap cannot run on this machine
        ├── SandboxFailed          one sandboxed execution could not be carried out
        ├── VerifierError          the verifier could not do its job (not the candidate's fault)
        └── TrialRefused           a trial could not be run (environment, task problems)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
#: Also ``exp run`` when an attempt directory the state database names is gone: evidence
#: was lost, and only restoring the run directory (the input) can bring it back.
EXIT_BAD_INPUT = 2
EXIT_INFRA = 3
#: A CI gate (``--fail-under``, ``exp verdict`` reject) was not met: the run itself is fine.
EXIT_BELOW_BAR = 1
#: ``assay history --fail-on-drift``: the newest run of a series drifted from the run before it
#: (the paired interval excludes zero by more than ``--drift-threshold``) or the served model
#: changed under the same requested name. The runs themselves are fine. (4 is taken by
#: ``exp verdict`` inconclusive and ``task check`` unsupported.)
EXIT_DRIFT = 5
#: ``exp verdict``: the evidence neither accepts nor rejects (more tasks or repeats needed).
EXIT_INCONCLUSIVE = 4
#: ``task check``: the task cannot be checked here (its checks need what this machine lacks).
EXIT_UNSUPPORTED = 4
#: A check command found a problem it names: ``agents check`` (an agent failed), ``suite
#: check`` (broken tasks), ``tasks validate`` (a bad task), ``task check`` (a grader defect).
EXIT_CHECK_FAILED = 1
EXIT_INTERRUPTED = 130


class AssayError(Exception):
    """Base of every error assay raises on purpose."""

    exit_code = 1


class InputError(AssayError):
    """The input must change: a suite, an option, a run directory, a record."""

    exit_code = EXIT_BAD_INPUT


class InfraError(AssayError):
    """The environment failed (endpoint, sandbox, verifier); the same command may succeed
    later."""

    exit_code = EXIT_INFRA


@dataclass(frozen=True)
class Problem:
    """One place to fix: the useful error is the one an editor can jump to."""

    path: Path
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f": field '{self.field}'"
        return f"{where}: {self.message}"


class SuiteError(InputError):
    """Bad input, with every problem found in the file (fixing them one run at a time is the
    kind of afternoon this tool is meant to save)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        shown = problems[:20]
        text = "\n".join(str(p) for p in shown)
        if len(problems) > len(shown):
            text += f"\n… and {len(problems) - len(shown)} more problems"
        super().__init__(text)

    @classmethod
    def one(cls, path: Path, message: str, *, line: int | None = None,
            field: str | None = None) -> SuiteError:
        return cls([Problem(path, line, field, message)])


class RunConflict(InputError):
    """Resuming into a run directory whose suite, prompt or settings differ: refused."""


class HoldoutExhausted(InputError):
    """A new run would look at a holdout split more often than its ``max_looks`` allows, and
    ``--holdout-reuse`` was not given; the message names the earlier looks."""


class NotComparable(InputError):
    """Two runs that cannot be paired (different suites, kinds or cases)."""


class GradingError(InputError):
    """Bad input for grading (not a coding run, a bad CSV line, ...)."""


class NeverOverwrite(InputError):
    """A record (grade, trial, attempt directory) already exists and is never written again."""


class RecordError(InputError):
    """A record file cannot be read: corrupt, the wrong kind, or a newer schema than this
    assay knows."""


class ImageRefused(InputError):
    """An OCI layout or ``docker save`` archive that cannot be imported: a blob that does not
    match its digest, an unsafe layer entry (a path out of the root, a write through a link),
    a limit passed, no image for this machine. The message names the file, the layer and the
    entry."""


class PullFailed(InfraError):
    """An image could not be fetched from its registry (unreachable, no credentials, no such
    image, skopeo missing): the message is ``cannot pull REF (reason)``. Content the registry
    served that does not match its digest is :class:`ImageRefused` instead."""


class ImageUnavailable(InfraError):
    """A pinned image could not be made present on this machine although it exists elsewhere
    (a Ray worker: its chunks were lost from the object store, no room in the store); the
    message names the image and the reason."""


class TransportError(InfraError):
    """The endpoint did not give a usable answer within the retry budget. ``tries`` holds
    every HTTP try; ``fatal`` means retrying cannot help (401/403/404, nothing reachable)."""

    def __init__(self, message: str, tries: list | None = None, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.tries = tries or []
        self.fatal = fatal


class SandboxUnavailable(InfraError):
    """bubblewrap cannot run here; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"bubblewrap sandbox unavailable: {reason}")
        self.reason = reason


class SandboxFailed(InfraError):
    """One sandboxed execution could not be carried out (not the candidate's verdict)."""


class VerifierError(InfraError):
    """The verifier could not do its job (not the candidate's fault)."""


class TrialRefused(InfraError):
    """The trial could not be run: infrastructure or task problems, not an agent verdict."""
