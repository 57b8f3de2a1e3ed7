"""A judge's pairwise preference of arm B over arm A, per task first, with its own interval.

Each pair (one task, one repetition, a trial of each arm) is judged twice, once in each order.
The two verdicts are combined before anything is counted: the same verdict in both orders is
that verdict; verdicts that differ with the order are a tie, and the pair counts toward the
position-bias rate (a judge that prefers whatever it reads first has not compared the two). A
pair with an invalid reply in either order counts for nothing: keeping its one valid order would
let the first-shown candidate's advantage back in through the side door.

A pair scores +1 when B is preferred, -1 when A is, 0 for a tie (the sign of Δ in ``exp
compare``: B - A). A task's preference is the mean over its counted pairs, i.e. (B wins - A
wins) / pairs, in [-1, 1]; the preference is the weighted mean over tasks (equal weights unless
weights were fixed before the run), and its interval is the moderated cluster t of
``stats.moderated`` on those per-task figures, with the same moderated variance as Δ's
interval (a preference is one score per pair, not a difference of two rates, so the symmetric
form): a t with G - 1 degrees of freedom over clusters (tasks, or families) whose
variance is pooled with a prior worth two clusters, of pairs scored like two fair coins (+1,
-1 a quarter of the time each: variance ½ a pair), and clipped to [-1, 1], where a preference
lies. A judge whose every pair flipped with the order has shown no preference, not a
preference known to be exactly zero: four such tasks give about ±0.7, not ±0. The
position-bias rate is a proportion of the counted pairs and gets a Wilson interval.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from assay.stats.intervals import _check_level, wilson
from assay.stats.moderated import moderated_t_interval

__all__ = ["PairOutcome", "PreferenceResult", "PreferenceRow", "combine_orders",
           "preference"]

Side = Literal["a", "b", "tie"]
#: what one order's reply said, mapped back to the arms; None: the reply was invalid
OrderVerdict = Side | None


def combine_orders(first_a: OrderVerdict, first_b: OrderVerdict) -> tuple[Side | None, bool]:
    """The pair's verdict from its two orders (A shown first, B shown first) and whether the
    verdict changed with the order. ``(None, False)`` when either order is invalid."""
    if first_a is None or first_b is None:
        return None, False
    if first_a == first_b:
        return first_a, False
    return "tie", True


@dataclass(frozen=True)
class PairOutcome:
    """One pair's two judged orders: ``ab`` is the verdict with A's candidate shown first,
    ``ba`` with B's first (both already mapped back from the opaque ids to the arms)."""

    task: Hashable
    rep: int
    ab: OrderVerdict
    ba: OrderVerdict


@dataclass(frozen=True)
class PreferenceRow:
    """One task's row of the table shown beside the interval."""

    task: Hashable
    cluster: Hashable
    weight: float
    pairs: int
    """Pairs that counted (both orders valid)."""
    b_wins: int
    a_wins: int
    ties: int
    """Ties, flipped pairs included."""
    flipped: int
    """Pairs whose verdict changed with the order (counted as ties)."""
    invalid: int
    """Pairs with an invalid reply in at least one order: counted for nothing."""
    preference: float | None
    """(b_wins - a_wins) / pairs; None when no pair counted."""


@dataclass(frozen=True)
class PreferenceResult:
    """The judge's preference of B over A; ``to_dict`` gives JSON-ready values. ``ci`` is None
    with fewer than two clusters (an interval from one cluster would be invented)."""

    preference: float | None
    ci: tuple[float, float] | None
    se: float | None
    df: int | None
    level: float
    method: str
    n_tasks: int
    n_clusters: int
    pairs: int
    """Pairs that counted."""
    b_wins: int
    a_wins: int
    ties: int
    flipped: int
    invalid_pairs: int
    position_bias: dict[str, Any]
    per_task: list[PreferenceRow]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci"] = None if self.ci is None else [self.ci[0], self.ci[1]]
        return out


def preference(pairs: Iterable[PairOutcome], *, clusters: Mapping[Any, Hashable] | None
               = None, weights: Mapping[Any, float] | None = None,
               level: float = 0.95) -> PreferenceResult:
    """Per-task preference of B over A, its moderated t interval, and the position-bias rate
    with its Wilson interval (see the module docstring for every definition).

    ``clusters`` and ``weights`` are keyed by the pairs' tasks, whatever their type (``Any``:
    Mapping's key type is invariant, so ``Mapping[Hashable, ...]`` would refuse a
    ``dict[str, ...]``)."""
    level = _check_level(level)
    cells: dict[Hashable, dict[str, int]] = {}
    seen: set[tuple[Hashable, int]] = set()
    for p in pairs:
        if (p.task, p.rep) in seen:
            raise ValueError(f"preference: duplicate pair {(p.task, p.rep)!r}")
        seen.add((p.task, p.rep))
        cell = cells.setdefault(p.task, {"a": 0, "b": 0, "tie": 0, "flipped": 0,
                                         "invalid": 0})
        verdict, flipped = combine_orders(p.ab, p.ba)
        if verdict is None:
            cell["invalid"] += 1
            continue
        cell[verdict] += 1
        cell["flipped"] += int(flipped)
    rows: list[PreferenceRow] = []
    for task, c in cells.items():
        n = c["a"] + c["b"] + c["tie"]
        wt = 1.0 if weights is None else float(weights.get(task, 1.0))
        rows.append(PreferenceRow(
            task=task, cluster=(clusters or {}).get(task, task), weight=wt, pairs=n,
            b_wins=c["b"], a_wins=c["a"], ties=c["tie"], flipped=c["flipped"],
            invalid=c["invalid"], preference=(c["b"] - c["a"]) / n if n else None))
    counted = [r for r in rows if r.preference is not None]
    notes: list[str] = []
    total_pairs = sum(r.pairs for r in rows)
    flipped_pairs = sum(r.flipped for r in rows)
    bias: dict[str, Any] = {"flipped": flipped_pairs, "pairs": total_pairs, "rate": None,
                            "ci": None}
    if total_pairs:
        lo, hi = wilson(flipped_pairs, total_pairs, level)
        bias.update(rate=flipped_pairs / total_pairs, ci=[lo, hi], method="wilson")
    pref = ci = se = df = None
    codes_by: dict[Hashable, int] = {}
    if counted:
        values = [float(r.preference) for r in counted]  # type: ignore[arg-type]
        ws = [r.weight for r in counted]
        codes = [codes_by.setdefault(r.cluster, len(codes_by)) for r in counted]
        pref = sum(w * v for w, v in zip(ws, values, strict=True)) / sum(ws)
        if len(codes_by) >= 2:
            prior = [0.5 / r.pairs for r in counted]
            pref, lo, hi, se, df = moderated_t_interval(values, ws, codes, prior, level=level)
            ci = (lo, hi)  # clipped to [-1, 1], where a preference lies
        else:
            notes.append("one cluster: no interval can be estimated")
    else:
        notes.append("no pair has a valid verdict in both orders: no preference")
    invalid = sum(r.invalid for r in rows)
    if invalid:
        notes.append(f"{invalid} pair(s) had an invalid reply in at least one order and count "
                     "for nothing")
    return PreferenceResult(
        preference=pref, ci=ci, se=se, df=df, level=level,
        method="moderated_t (per-task preference, t with G-1 df)", n_tasks=len(counted),
        n_clusters=len(codes_by), pairs=total_pairs, b_wins=sum(r.b_wins for r in rows),
        a_wins=sum(r.a_wins for r in rows), ties=sum(r.ties for r in rows), flipped=flipped_pairs,
        invalid_pairs=invalid, position_bias=bias, per_task=rows, notes=notes)
