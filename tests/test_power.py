"""Power planning: the stated power must hold when the real analysis is simulated.

The check is independent of the planner's own simulation: fresh trials are
drawn with another seed and analysed by ``compare_arms`` (the interval the
report uses), and the share of intervals whose lower bound is above zero must
match the planner's 80% within 5 points.
"""

from __future__ import annotations

import numpy as np
import pytest

from assay.stats import compare_arms, minimum_detectable_effect, simulated_power, tasks_needed


def _detected_share(
    delta: float, n_tasks: int, reps: int, p_a: float | list[float], n_rep: int, seed: int
) -> float:
    rng = np.random.default_rng(seed)
    pilot = np.atleast_1d(np.asarray(p_a, dtype=float))
    hits = 0
    for _ in range(n_rep):
        base = pilot if pilot.size == 1 else rng.choice(pilot, size=n_tasks)
        base = np.broadcast_to(base, (n_tasks,))
        trials = []
        for i, pa in enumerate(base):
            pb = min(1.0, pa + delta)
            ua, ub = rng.random(reps), rng.random(reps)
            trials += [(i, "A", r, bool(ua[r] < pa)) for r in range(reps)]
            trials += [(i, "B", r, bool(ub[r] < pb)) for r in range(reps)]
        res = compare_arms(trials, a="A", b="B")
        assert res.ci is not None
        hits += res.ci[0] > 0.0
    return hits / n_rep


def test_mde_power_holds_in_independent_simulation() -> None:
    mde = minimum_detectable_effect(n_tasks=30, reps=3, p_a=0.6, seed=0)
    assert mde is not None and 0.1 < mde < 0.3
    # 1000 replications: SE of a power near 0.8 is ~1.3 points, so ±5 is ~4 SE.
    share = _detected_share(mde, 30, 3, 0.6, n_rep=1000, seed=99)
    print(f"MDE {mde:.3f}: planner 0.80, independent simulation {share:.3f}")
    assert share == pytest.approx(0.80, abs=0.05)


def test_mde_from_pilot_rates_holds() -> None:
    pilot = [0.0, 0.1, 0.3, 0.5, 0.5, 0.7, 0.9, 1.0, 1.0, 0.2]
    mde = minimum_detectable_effect(n_tasks=40, reps=2, p_a=pilot, seed=1)
    assert mde is not None
    share = _detected_share(mde, 40, 2, pilot, n_rep=800, seed=123)
    print(f"pilot MDE {mde:.3f}: independent simulation {share:.3f}")
    assert share == pytest.approx(0.80, abs=0.05)


def test_mde_shrinks_with_more_tasks_and_repetitions() -> None:
    small = minimum_detectable_effect(n_tasks=20, reps=1, p_a=0.5, n_sims=2000)
    more_tasks = minimum_detectable_effect(n_tasks=80, reps=1, p_a=0.5, n_sims=2000)
    more_reps = minimum_detectable_effect(n_tasks=20, reps=5, p_a=0.5, n_sims=2000)
    assert small is not None and more_tasks is not None and more_reps is not None
    assert more_tasks < small and more_reps < small
    # Two tasks, one repetition: no effect is detectable 80% of the time.
    assert minimum_detectable_effect(n_tasks=2, reps=1, p_a=0.5) is None


def test_tasks_needed_is_the_smallest_n_and_holds() -> None:
    n = tasks_needed(0.15, reps=3, p_a=0.5, n_sims=2000, seed=4)
    assert n is not None and 10 < n < 200
    assert simulated_power(0.15, n_tasks=n, reps=3, p_a=0.5, n_sims=2000, seed=4) >= 0.8
    assert simulated_power(0.15, n_tasks=n - 1, reps=3, p_a=0.5, n_sims=2000, seed=4) < 0.8
    share = _detected_share(0.15, n, 3, 0.5, n_rep=800, seed=5)
    print(f"N needed {n}: independent simulation {share:.3f}")
    assert share == pytest.approx(0.80, abs=0.05)
    assert tasks_needed(0.01, reps=1, p_a=0.5, n_sims=200, n_max=64) is None
    with pytest.raises(ValueError):
        tasks_needed(0.0, reps=1, p_a=0.5)


def test_power_inputs_are_checked() -> None:
    with pytest.raises(ValueError):
        simulated_power(0.1, n_tasks=1, reps=1, p_a=0.5)
    with pytest.raises(ValueError):
        simulated_power(0.1, n_tasks=10, reps=1, p_a=[1.2])
    # No effect: the one-sided "detected" rate is about alpha / 2.
    assert simulated_power(0.0, n_tasks=50, reps=3, p_a=0.5, n_sims=4000) < 0.05
