"""The comparisons behind the narrow scorers: text in its folded form, numbers within a
tolerance, and the fields of an object, each field by its own rule.

Numbers are compared in decimal on the numbers as written (``Decimal(repr(x))``), not in binary
floating point: with ``abs_tol: 0.01`` an answer of 1.01 against 1.00 is within tolerance, as a
person reading the suite expects, where ``abs(1.01 - 1.0)`` in floats is 0.010000000000000009.

A number written as a string is read only in the plain forms ``12``, ``-0.5``, ``1e3``,
``.25``: ``"1,000"`` is refused (a thousands separator or a decimal comma, depending on the
locale: guessing would score some answers by luck), and so are ``"NaN"``, ``"inf"`` and
anything beyond the range of a float (no finite tolerance can hold them).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from assay.suites.scorer_config import FieldRule, fold_text, is_number

_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_FLOAT = Decimal("1.7976931348623157e308")


def read_number(value: Any) -> tuple[Decimal | None, str | None]:
    """(the number, None) or (None, why it is not one): a JSON number, or a string in a plain
    form (see the module docstring)."""
    if is_number(value):
        try:
            d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        except InvalidOperation:
            return None, f"{value!r} is not finite"
        return (d, None) if d.is_finite() and abs(d) <= _MAX_FLOAT else \
            (None, f"{value!r} is not finite")
    if isinstance(value, str):
        text = value.strip()
        if _PLAIN_NUMBER.fullmatch(text):
            d = Decimal(text)
            if abs(d) > _MAX_FLOAT:
                return None, f"{text[:40]!r} is beyond the range of a float"
            return d, None
        if re.fullmatch(r"[+-]?[\d.,]+", text) and "," in text:
            return None, (f"{text[:40]!r}: a comma is a thousands separator or a decimal comma "
                          "depending on the locale; write the number plainly (1000, 0.5)")
        return None, f"{text[:40]!r} is not a plain number"
    return None, f"a {'boolean' if isinstance(value, bool) else type(value).__name__}, not a " \
                 "number"


def as_json_number(d: Decimal) -> int | float:
    """A decimal as the JSON number a row records (an integer stays an integer)."""
    if d == d.to_integral_value() and abs(d) < 2 ** 63:
        return int(d)
    return float(d)


def compare_numbers(answer: Decimal, expected: Decimal, abs_tol: float,
                    rel_tol: float) -> tuple[bool, dict[str, Any]]:
    """Within ``max(abs_tol, rel_tol * |expected|)``: the tolerance is relative to the expected
    value, not to the answer (a wild answer must not widen its own tolerance)."""
    diff = abs(answer - expected)
    tol = max(Decimal(repr(float(abs_tol))), Decimal(repr(float(rel_tol))) * abs(expected))
    return diff <= tol, {
        "answer": as_json_number(answer), "expected": as_json_number(expected),
        "abs_diff": float(diff),
        "rel_diff": float(diff / abs(expected)) if expected else None,
        "tolerance": float(tol)}


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (1 and 1.0 are the same), but a boolean is not a number
    and a string is not a number, as JSON says and Python does not."""
    if is_number(a) and is_number(b):
        return read_number(a)[0] == read_number(b)[0]
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def compare_field(rule: FieldRule, present: bool, answer: Any, expected: Any, path: str,
                  out: dict[str, dict[str, Any]]) -> bool:
    """Record the verdict of the field at ``path`` (and of its nested fields) in ``out``;
    return it. A field missing or of the wrong type is wrong, with the reason why."""
    why: str | None = None
    ok = False
    if not present:
        why = "missing"
    elif rule.rule == "exact":
        ok = same_json(answer, expected)
        why = None if ok else "differs"
    elif rule.rule == "normalized_text":
        if not isinstance(answer, str):
            why = f"not a string ({type(answer).__name__})"
        else:
            a, e = fold_text(answer), fold_text(expected)
            ok = a == e
            why = None if ok else f"normalised {a[:80]!r} ≠ {e[:80]!r}"
    elif rule.rule == "numeric":
        num, bad = read_number(answer)
        if num is None:
            why = bad
        else:
            ok, detail = compare_numbers(num, read_number(expected)[0],  # type: ignore[arg-type]
                                         rule.abs_tol, rule.rel_tol)
            why = None if ok else (f"|{detail['answer']} − {detail['expected']}| = "
                                   f"{detail['abs_diff']:.6g} > {detail['tolerance']:.6g}")
    elif rule.rule == "json_fields":
        if not isinstance(answer, dict):
            why = f"not an object ({type(answer).__name__})"
            for name, sub in rule.fields:
                compare_field(sub, False, None, None, f"{path}.{name}", out)
        else:
            results = [compare_field(sub, name in answer, answer.get(name), expected[name],
                                     f"{path}.{name}", out) for name, sub in rule.fields]
            ok = all(results)
            why = None if ok else "nested fields differ"
    out[path] = {"correct": ok, "why": why}
    return ok


def compare_fields(fields: tuple[tuple[str, FieldRule], ...], answer: dict[str, Any],
                   expected: dict[str, Any]) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Every listed field (nested ones as ``parent.child``) with its verdict; right only when
    every top-level field is. Fields of the answer the scorer does not list are ignored."""
    out: dict[str, dict[str, Any]] = {}
    results = [compare_field(rule, name in answer, answer.get(name), expected[name], name, out)
               for name, rule in fields]
    return all(results), out


def field_paths(fields: tuple[tuple[str, FieldRule], ...], prefix: str = "") -> list[str]:
    """Every field path a ``json_fields`` scorer reports on, parents before their children."""
    out: list[str] = []
    for name, rule in fields:
        path = f"{prefix}{name}"
        out.append(path)
        out += field_paths(rule.fields, f"{path}.")
    return out
