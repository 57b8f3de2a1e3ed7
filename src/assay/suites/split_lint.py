"""``task lint``'s check that no task sits in two splits under different names.

A holdout estimate is only honest when nothing in it was seen while tuning, and the easiest way
to break that is by accident: a task copied into dev and holdout under two ids, or two tasks
that differ only in name. Ids cannot catch it, content can: the same starting tree, the same
instruction (whitespace aside), or, when the bundles say a family must stay in one split, one
family in both dev and holdout. These are warnings, not errors: two tasks may honestly share a
repository snapshot, and only a person can tell.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping

from assay.suites.bundle import Bundle


def normalised_instruction(bundle: Bundle) -> str:
    """The instruction with every run of whitespace made one space, ends stripped."""
    text = bundle.instruction_path.read_text(encoding="utf-8", errors="replace")
    return " ".join(text.split())


def _name(b: Bundle) -> str:
    return f"{b.spec.split} task {b.id} ({b.root})"


def _pairs(bundles: Iterable[Bundle], key: Callable[[Bundle], Hashable | None],
           ok: Callable[[Bundle, Bundle], bool]) -> list[tuple[Bundle, Bundle]]:
    groups: dict[Hashable, list[Bundle]] = defaultdict(list)
    for b in bundles:
        k = key(b)
        if k is not None:
            groups[k].append(b)
    out = []
    for members in groups.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if a.spec.split != b.spec.split and ok(a, b):
                    out.append((a, b))
    return out


def split_overlaps(bundles: list[Bundle], digests: Mapping[str, str]) -> list[str]:
    """One warning per pair of bundles in different splits that look like one task, naming
    both; ``digests`` maps task id to its starting tree's digest (``task lint`` has computed
    them already)."""
    every = sorted(bundles, key=lambda b: (b.spec.split, b.id))
    warnings = []
    for a, b in _pairs(every, lambda x: digests.get(x.id), lambda a, b: True):
        warnings.append(f"same starting tree ({digests[a.id][:19]}…) in two splits: "
                        f"{_name(a)} and {_name(b)}")
    instructions = {b.id: normalised_instruction(b) for b in every}
    for a, b in _pairs(every, lambda x: instructions[x.id] or None, lambda a, b: True):
        warnings.append(f"same instruction (whitespace aside) in two splits: {_name(a)} and "
                        f"{_name(b)}")

    def must_not_cross(a: Bundle, b: Bundle) -> bool:
        return ({a.spec.split, b.spec.split} == {"dev", "holdout"}
                and (a.spec.family_must_not_cross_splits or b.spec.family_must_not_cross_splits))

    for a, b in _pairs(every, lambda x: x.spec.family, must_not_cross):
        warnings.append(f"family {a.spec.family!r} crosses dev and holdout, and "
                        f"family_must_not_cross_splits is set: {_name(a)} and {_name(b)}")
    return warnings


__all__ = ["normalised_instruction", "split_overlaps"]
