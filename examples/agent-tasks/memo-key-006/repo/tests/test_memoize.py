from memo import CacheInfo, memoize


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def counting(func):
    """Wrap ``func`` so that ``counted.calls`` records every real call."""

    def counted(*args, **kwargs):
        counted.calls += 1
        return func(*args, **kwargs)

    counted.calls = 0
    return counted


def test_caches_by_positional_arguments():
    square = counting(lambda x: x * x)
    cached = memoize()(square)
    assert cached(3) == 9
    assert cached(3) == 9
    assert cached(4) == 16
    assert square.calls == 2
    assert cached.cache_info() == CacheInfo(hits=1, misses=2, size=2)


def test_ttl_expiry():
    clock = FakeClock()
    double = counting(lambda x: 2 * x)
    cached = memoize(ttl=10, clock=clock)(double)
    cached(1)
    clock.now += 9.9
    cached(1)
    assert double.calls == 1
    clock.now += 0.1
    cached(1)
    assert double.calls == 2


def test_invalidate_positional():
    inc = counting(lambda x: x + 1)
    cached = memoize()(inc)
    cached(1)
    cached(2)
    cached.invalidate(1)
    cached(1)
    cached(2)
    assert inc.calls == 3
    assert cached.cache_info().size == 2


def test_invalidate_unknown_is_a_no_op():
    cached = memoize()(lambda x: x)
    cached.invalidate(42)
    assert cached.cache_info().size == 0


def test_clear():
    ident = counting(lambda x: x)
    cached = memoize()(ident)
    cached(1)
    cached.clear()
    cached(1)
    assert ident.calls == 2


def test_wraps_metadata():
    @memoize()
    def documented(x):
        """Docstring."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docstring."
