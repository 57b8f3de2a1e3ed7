"""Hidden behaviour tests for memo-key-006."""

from memo import memoize


def make_price():
    calls = []

    @memoize(ttl=300, clock=lambda: 0.0)
    def price(sku, currency="USD"):
        calls.append((sku, currency))
        return "%s:%s:%d" % (sku, currency, len(calls))

    return price, calls


def test_different_keyword_values_are_different_entries():
    price, calls = make_price()
    usd = price("apple", currency="USD")
    eur = price("apple", currency="EUR")
    assert usd != eur
    assert calls == [("apple", "USD"), ("apple", "EUR")]


def test_invalidate_accepts_keyword_arguments():
    price, calls = make_price()
    price("apple", currency="EUR")
    price.invalidate("apple", currency="EUR")
    price("apple", currency="EUR")
    assert len(calls) == 2


def test_positional_and_keyword_spellings_share_an_entry():
    price, calls = make_price()
    first = price("apple", "EUR")
    assert price("apple", currency="EUR") == first
    assert price(sku="apple", currency="EUR") == first
    assert len(calls) == 1


def test_default_filled_in_shares_an_entry():
    price, calls = make_price()
    first = price("apple")
    assert price("apple", "USD") == first
    assert len(calls) == 1


def test_invalidate_by_a_different_spelling():
    price, calls = make_price()
    price("apple", "EUR")
    price.invalidate(sku="apple", currency="EUR")
    price("apple", "EUR")
    assert len(calls) == 2
