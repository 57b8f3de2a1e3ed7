"""The conditions each arm ran under: what an A/B comparison needs to have been the same.

Two arms run at once share one gateway, one upstream and usually one key, so one arm's agent
could change what the other's got (issue 35). The comparison is only fair if the conditions
match: the pre-registration asks that the groups match in "concurrency, rate limits, and cache
warmth". This module reads, from the run directory alone (each attempt's ledger and the run's
``gateway_events.jsonl``), per arm:

- ``throttled_rate``: the share of its forwarded calls the upstream answered 429 or 529, and
  how many of those were put down to other attempts' traffic (``throttled_by_others``);
- ``refusals``: the gateway's refusals of its attempts' connections and requests, by reason
  (each event's ``count``); ``own_refusals``: those its agent caused by its own behaviour
  (over its own limits, malformed, too slow), apart from ``ceiling``: refusals because a
  gateway-wide ceiling was hit (then the comparison is not clean, whatever the figures);
- ``cached_input_share``: the share of input tokens the provider's prompt cache served, over
  calls that reported both counts (null when none did: unknown, never zero);
- ``window``: the first and last call's time.

Warnings (on the verdict and the report): a gateway-wide ceiling hit by any attempt; arms whose
429/overload rates differ beyond their 95% Wilson intervals; cached-input shares whose per-call
intervals do not overlap; time windows that do not overlap (the arms did not run together).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from assay.records.io import iter_rows
from assay.stats.intervals import wilson

#: Where an experiment run keeps its attempts: trials/<task>/<arm>/<rep>/<attempt>/.
TRIALS = "trials"
EVENTS = "gateway_events.jsonl"
LEDGER = "model_calls.jsonl"
THROTTLED = (429, 529)
#: Refusals that say the gateway as a whole was full, not the attempt over its own limits.
CEILING = ("gateway_share", "gateway_busy")


def _ledger_figures(path: Path, acc: dict[str, Any]) -> None:
    for row in iter_rows(path, on_torn=lambda _line: None):  # a torn last row: no figures
        if not row.get("forwarded"):
            continue
        acc["calls"] += 1
        if row.get("upstream_status") in THROTTLED:
            acc["throttled"] += 1
            if row.get("throttled_by") == "others":
                acc["throttled_by_others"] += 1
        inp, cached = row.get("input_tokens"), row.get("cached_input_tokens")
        if isinstance(inp, int) and isinstance(cached, int) and inp > 0:
            acc["input"] += inp
            acc["cached"] += min(cached, inp)
            acc["cache_calls"] += 1
            acc["cache_hit_calls"] += cached > 0
        when = row.get("time")
        if isinstance(when, str):
            first, last = acc["window"]
            acc["window"] = [min(first or when, when), max(last or when, when)]


def run_conditions(run_dir: Path, arms: list[str]) -> dict[str, Any]:
    """``{"arms": {arm: figures}, "ceiling": {reason: count}, "warnings": [...]}``."""
    run_dir = Path(run_dir)
    figures: dict[str, dict[str, Any]] = {}
    for arm in arms:
        acc: dict[str, Any] = {"calls": 0, "throttled": 0, "throttled_by_others": 0,
                               "input": 0, "cached": 0, "cache_calls": 0,
                               "cache_hit_calls": 0, "window": [None, None]}
        for ledger in sorted((run_dir / TRIALS).glob(f"*/{arm}/*/*/{LEDGER}")):
            _ledger_figures(ledger, acc)
        figures[arm] = acc
    refusals: dict[str, Counter[str]] = {arm: Counter() for arm in arms}
    ceiling: Counter[str] = Counter()
    for event in iter_rows(run_dir / EVENTS, on_torn=lambda _line: None):
        reason, count = str(event.get("reason")), int(event.get("count") or 1)
        if reason in CEILING:
            ceiling[reason] += count
        parts = str(event.get("attempt_id") or "").split("/")
        if len(parts) == 4 and parts[1] in refusals:
            refusals[parts[1]][reason] += count
    out: dict[str, Any] = {}
    for arm, acc in figures.items():
        by_reason = dict(sorted(refusals[arm].items()))
        out[arm] = {
            "calls": acc["calls"],
            "throttled": acc["throttled"],
            "throttled_rate": acc["throttled"] / acc["calls"] if acc["calls"] else None,
            "throttled_by_others": acc["throttled_by_others"],
            "refusals": by_reason,
            "own_refusals": sum(n for r, n in by_reason.items() if r not in CEILING),
            "ceiling_refusals": sum(n for r, n in by_reason.items() if r in CEILING),
            "cached_input_share": acc["cached"] / acc["input"] if acc["input"] else None,
            "cache_calls": acc["cache_calls"],
            "cache_hit_calls": acc["cache_hit_calls"],
            "window": acc["window"] if acc["window"][0] else None,
        }
    return {"arms": out, "ceiling": dict(ceiling), "warnings": _warnings(out, ceiling)}


def attempt_refusals(attempt_dir: Path) -> str | None:
    """One line on what the gateway (and the sandbox's forwarder) refused of one attempt, for
    ``trial show`` and the trial page; None when nothing was. The attempt directory is
    ``<run>/trials/<task>/<arm>/<rep>/<attempt>``, its id the last four parts."""
    attempt_dir = Path(attempt_dir)
    if len(attempt_dir.parts) < 6 or attempt_dir.parts[-5] != TRIALS:
        return None
    attempt_id = "/".join(attempt_dir.parts[-4:])
    counts: Counter[str] = Counter()
    for event in iter_rows(attempt_dir.parents[4] / EVENTS, on_torn=lambda _line: None):
        if event.get("attempt_id") == attempt_id:
            counts[str(event.get("reason"))] += int(event.get("count") or 1)
    throttled = by_others = 0
    for row in iter_rows(attempt_dir / LEDGER, on_torn=lambda _line: None):
        if row.get("upstream_status") in THROTTLED:
            throttled += 1
            by_others += row.get("throttled_by") == "others"
    parts = []
    own = {r: n for r, n in counts.items() if r not in CEILING}
    if own:
        parts.append(f"the gateway refused {sum(own.values())} of its connections or requests "
                     "because of its own behaviour (" +
                     ", ".join(f"{r} {n}" for r, n in sorted(own.items())) + ")")
    hit = {r: n for r, n in counts.items() if r in CEILING}
    if hit:
        parts.append(f"{sum(hit.values())} refused because a gateway-wide ceiling was hit (" +
                     ", ".join(f"{r} {n}" for r, n in sorted(hit.items())) + ")")
    if throttled:
        parts.append(f"the upstream answered 429/overloaded {throttled} time(s), {by_others} "
                     "put down to other attempts' traffic")
    return "; ".join(parts) or None


def _apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def _warnings(arms: dict[str, dict[str, Any]], ceiling: Counter[str]) -> list[str]:
    out = []
    if ceiling:
        what = ", ".join(f"{n} {r}" for r, n in sorted(ceiling.items()))
        out.append(f"a gateway-wide ceiling was hit ({what}): the arms may not have had the "
                   "same access to the gateway, so the comparison is not clean")
    names = list(arms)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            fa, fb = arms[a], arms[b]
            if fa["calls"] and fb["calls"]:
                ia, ib = wilson(fa["throttled"], fa["calls"]), wilson(fb["throttled"], fb["calls"])
                if _apart(ia, ib):
                    out.append(f"the upstream's 429/overload rate differs between {a} "
                               f"({fa['throttled']}/{fa['calls']}) and {b} "
                               f"({fb['throttled']}/{fb['calls']}) beyond the noise: the arms "
                               "did not meet the same rate limits")
            if fa["cache_calls"] and fb["cache_calls"]:
                ca = wilson(fa["cache_hit_calls"], fa["cache_calls"])
                cb = wilson(fb["cache_hit_calls"], fb["cache_calls"])
                if _apart(ca, cb):
                    out.append(f"the prompt cache served input on {fa['cache_hit_calls']}/"
                               f"{fa['cache_calls']} calls of {a} and {fb['cache_hit_calls']}/"
                               f"{fb['cache_calls']} of {b}, beyond the noise: the arms did "
                               "not run with the same cache warmth")
            wa, wb = fa["window"], fb["window"]
            if wa and wb and (wa[1] < wb[0] or wb[1] < wa[0]):
                out.append(f"{a} and {b} made their calls in time windows that do not "
                           f"overlap ({wa[0]} to {wa[1]}; {wb[0]} to {wb[1]}): they did not "
                           "meet the same upstream at the same time")
    return out


def conditions_markdown(section: dict[str, Any]) -> list[str]:
    """The per-arm table and the warnings, for a report or ``exp compare``."""
    def rate(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    out = ["", "### Conditions per arm", "",
           "| arm | calls | 429/overload | of them put down to others | gateway refusals "
           "(own / ceiling) | cached input | first call | last call |",
           "|---|---:|---:|---:|---|---:|---|---|"]
    for arm, f in section["arms"].items():
        reasons = ", ".join(f"{r} {n}" for r, n in f["refusals"].items()) or "none"
        first, last = f["window"] or ("n/a", "n/a")
        out.append(f"| {arm} | {f['calls']} | {f['throttled']} ({rate(f['throttled_rate'])}) "
                   f"| {f['throttled_by_others']} | {f['own_refusals']} / "
                   f"{f['ceiling_refusals']} ({reasons}) | {rate(f['cached_input_share'])} "
                   f"| {first} | {last} |")
    out += [""] + [f"**Warning**: {w}." for w in section["warnings"]]
    return out
