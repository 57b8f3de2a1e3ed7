"""npm-style version ranges: "^1.2.0", "~1.2.3", ">=1.0.0 <2.0.0", "*"."""

from semverlite.version import Version, compare, parse

_OPERATORS = {
    ">=": lambda order: order >= 0,
    "<=": lambda order: order <= 0,
    ">": lambda order: order > 0,
    "<": lambda order: order < 0,
    "=": lambda order: order == 0,
}


def _comparators(spec):
    """Expand a range into a list of (operator, Version) pairs that must all hold."""
    comparators = []
    for token in spec.split():
        if token in ("*", "x", "X"):
            continue
        if token.startswith("^"):
            low = parse(token[1:])
            if low.major:
                high = Version(low.major + 1, 0, 0)
            elif low.minor:
                high = Version(0, low.minor + 1, 0)
            else:
                high = Version(0, 0, low.patch + 1)
            comparators += [(">=", low), ("<", high)]
        elif token.startswith("~"):
            low = parse(token[1:])
            comparators += [(">=", low), ("<", Version(low.major, low.minor + 1, 0))]
        else:
            for op in (">=", "<=", ">", "<", "="):
                if token.startswith(op):
                    comparators.append((op, parse(token[len(op):])))
                    break
            else:
                comparators.append(("=", parse(token)))
    return comparators


def satisfies(version, spec):
    """Return True if ``version`` is inside the range ``spec``."""
    version = parse(version)
    return all(_OPERATORS[op](compare(version, target)) for op, target in _comparators(spec))


def max_satisfying(versions, spec):
    """Return the highest of ``versions`` (as given) that satisfies ``spec``, or None."""
    best = None
    for candidate in versions:
        if satisfies(candidate, spec) and (best is None or compare(candidate, best) > 0):
            best = candidate
    return best
