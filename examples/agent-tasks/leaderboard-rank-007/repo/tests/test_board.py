from leaderboard import Board


def test_top_is_best_first():
    b = Board()
    for name, score in [("ann", 30), ("bob", 50), ("cat", 40)]:
        b.submit(name, score)
    assert b.top(2) == [("bob", 50), ("cat", 40)]


def test_best_score_is_kept():
    b = Board()
    b.submit("ann", 30)
    b.submit("ann", 10)
    b.submit("ann", 35)
    assert b.top(1) == [("ann", 35)]


def test_rank_of_distinct_scores():
    b = Board()
    for name, score in [("ann", 30), ("bob", 50), ("cat", 40)]:
        b.submit(name, score)
    assert [b.rank(n) for n in ("bob", "cat", "ann")] == [1, 2, 3]
