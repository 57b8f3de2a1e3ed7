"""tests/support/schedule.py: the order ``make test`` runs its units in, played out on a clock.

The scheduler is xdist's own ``LoadFileScheduling`` with our units and one change (a worker
still holding a long test is topped up with the shortest unit left). The workers here are
stand-ins that record what they are sent and "run" it on a simulated clock by the measured
seconds: a real xdist run of minutes would show the same order but not in a test's budget.
"""

from __future__ import annotations

import heapq
from types import SimpleNamespace
from typing import Any

from support.schedule import TOP_UP_SECONDS, MeasuredScheduling


class Worker:
    """What the scheduler needs of xdist's WorkerController: it is sent test indices, it may be
    told to shut down."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _play(seconds: dict[str, float], workers: int, top_up: bool = True) -> tuple[float, dict]:
    """Run the collection (already sorted longest unit first, as conftest sorts it) on
    ``workers`` simulated workers; returns the last finish and each worker's tests in order.
    A worker starts a test only when it holds the next one or is shutting down, as xdist's do."""
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"],
                             option=SimpleNamespace(loadscopereorder=True))
    sched: Any = MeasuredScheduling(config)
    sched.seconds = seconds
    if not top_up:  # xdist's own rule: always the next unit in the queue
        sched.seconds = {}
    collection = list(seconds)
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    clock, events = 0.0, []  # (finish time, worker index)
    ran: dict[str, list[str]] = {n.name: [] for n in nodes}
    busy = [False] * workers

    def start(i: int, now: float) -> None:
        node = nodes[i]
        if busy[i] or not node.queue or (len(node.queue) < 2 and not node.shutting_down):
            return
        busy[i] = True
        nodeid = collection[node.queue[0]]
        ran[node.name].append(nodeid)
        heapq.heappush(events, (now + seconds[nodeid], i))

    for i in range(workers):
        start(i, 0.0)
    while events:
        clock, i = heapq.heappop(events)
        busy[i] = False
        index = nodes[i].queue.pop(0)
        sched.mark_test_complete(nodes[i], index)
        for j in range(workers):
            start(j, clock)
    assert sum(map(len, ran.values())) == len(collection), "every test ran once"
    return clock, ran


def test_a_short_unit_not_a_long_one_waits_behind_a_long_test() -> None:
    """The quiet pass as seen: two single-test units of about a minute (spread files), two of
    about forty seconds, then Codex's file of 27 s as one unit and short tests. With xdist's
    rule the Codex file is sent behind the first minute-long test and starts only at 64 s; with
    the top-up rule a worker that holds a long test gets a short unit, and Codex's file goes to
    the first worker that runs dry (a finish of 70 s where xdist's rule gives 91)."""
    seconds = {"tests/test_agent_qwen.py::test_budgets": 64.0,
               "tests/test_agent_mini_swe_agent.py::test_budgets": 64.0,
               "tests/test_examples.py::test_rehearsal": 43.0,
               "tests/test_agent_mini_swe_agent.py::test_refusal": 42.0}
    seconds.update({f"tests/test_agent_codex.py::test_{i}": 27.0 / 3 for i in range(3)})
    seconds.update({f"tests/test_agent_sessions.py::test_{i}": 1.0 for i in range(8)})
    assert 64.0 >= TOP_UP_SECONDS
    plain, plain_ran = _play(seconds, 4, top_up=False)
    ours, ran = _play(seconds, 4)
    codex_after = [w for w, tests in plain_ran.items()
                   if tests[0].endswith("test_budgets") and "codex" in tests[1]]
    assert codex_after, plain_ran  # xdist's rule: the 27 s file behind a 64 s test
    assert plain == 64.0 + 27.0
    # Codex's file starts when the first forty-second test ends (42 + 27), and at most one
    # one-second test follows it: 21 s sooner than xdist's rule, within a second of the best
    assert ours <= 42.0 + 27.0 + 1.0, (ours, ran)
    for tests in ran.values():  # the long tests still start first, at 0 s
        assert "sessions" not in tests[0]


def test_short_units_alone_keep_the_longest_first_order() -> None:
    """Where no worker holds a long test, the rule is xdist's: the next unit is the longest
    left, so the finish is the same as before."""
    seconds = {f"tests/test_x.py::test_{i}": float(9 - i) for i in range(9)}
    assert max(seconds.values()) < TOP_UP_SECONDS
    assert _play(seconds, 3) == _play(seconds, 3, top_up=False)
