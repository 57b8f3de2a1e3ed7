#!/bin/sh
# The reference fix: a player's rank counts the players with a strictly better score.
set -e
python3 - <<'PY'
from pathlib import Path

p = Path("src/leaderboard/board.py")
text = p.read_text()
old = "        return self._scores.index((score, name)) + 1\n"
new = ("        # the first entry with this score: everyone before it scored strictly more\n"
       "        return self._scores.bisect_key_left((-score, \"\")) + 1\n")
assert old in text
p.write_text(text.replace(old, new))
PY
