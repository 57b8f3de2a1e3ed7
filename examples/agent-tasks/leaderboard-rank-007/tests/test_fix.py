from leaderboard import Board


def test_equal_scores_share_a_rank():
    b = Board()
    for name, score in [("ann", 40), ("bob", 50), ("cat", 40), ("dan", 10)]:
        b.submit(name, score)
    assert b.rank("ann") == 2 and b.rank("cat") == 2


def test_rank_after_a_tie_skips():
    b = Board()
    for name, score in [("ann", 40), ("bob", 50), ("cat", 40), ("dan", 10)]:
        b.submit(name, score)
    assert b.rank("dan") == 4


def test_rank_follows_an_improved_score():
    b = Board()
    for name, score in [("ann", 40), ("bob", 50), ("cat", 40)]:
        b.submit(name, score)
    b.submit("cat", 60)
    assert (b.rank("cat"), b.rank("bob"), b.rank("ann")) == (1, 2, 3)
