"""Derived canaries: must-fail copies of the task's own tests, which a working fix fails.

A planted canary of a fixed shape (``value = N`` / ``assert value == M``) can be recognised by the
candidate's code, which then lets it fail and makes every other test a no-op. A derived canary
cannot be told apart that way: it is a copy of one of the file's own test functions, byte for
byte, with one asserted thing changed so that the two cannot both pass:

``operator``  the assertion's comparison turned into its opposite (``==``/``!=``, ``<``/``>=``,
              ``>``/``<=``, ``in``/``not in``, ``is``/``is not``);
``value``     a literal on the expected side of an ``==`` changed (another literal of the same
              type from the file, or a nearby value);
``truth``     ``assert x`` turned into ``assert not (x)`` and back;
``exception`` ``pytest.raises(E)`` with a built-in exception unrelated to ``E``.

The copy is named like the file's own tests (their words, recombined) and placed among them,
before or after its original. Because the changed assertion and the original exclude each other,
a candidate whose original test passes must fail the copy, so "the original passed and its
copy passed" is tamper evidence, while a copy that passes beside a failing original only says the
candidate is wrong. A skipping or no-op attack therefore has to tell a real test from its copy,
and nothing in the text tells them apart.

Copies are generated here from the trusted test files (pure text in, text out, by ``ast``
positions, so the copy keeps the original's formatting and comments), validated once per task on
the trusted tree (a copy that does not fail with the reference solution is dropped and counted),
and drawn afresh for every verification from a seed the grade records.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any

from assay.grading.verify.canaries import parse_python

NAME_SLOT = "__assay_canary_name__"
#: Test functions per file that get a copy in one verification (all of them in small files).
MAX_PER_FILE = 8
#: The same for the workspace's own test files: the agent has read those, so a copy there can
#: be found by comparing with the file it saw; a few still catch the cruder attacks (a no-op of
#: every test, flipped reports) and cost little. The hidden tests are where copies cannot be
#: told apart, and get the full number.
MAX_PER_KNOWN_FILE = 3
#: Mutations kept per test function in the validated pool (a verification uses one).
PER_TEST = 2
_FLIP = {ast.Eq: (r"==", "!="), ast.NotEq: (r"!=", "=="), ast.Lt: (r"<(?!=)", ">="),
         ast.GtE: (r">=", "<"), ast.Gt: (r">(?!=)", "<="), ast.LtE: (r"<=", ">"),
         ast.NotIn: (r"not\s+in", "in"), ast.In: (r"\bin\b", "not in"),
         ast.IsNot: (r"is\s+not", "is"), ast.Is: (r"\bis\b", "is not")}
_EXCEPTIONS = ("TypeError", "KeyError", "IndexError", "ZeroDivisionError", "AttributeError",
               "ValueError", "RuntimeError", "OverflowError")
_FILLER_WORDS = ("value", "input", "case", "result", "basic", "simple", "mixed", "other")


@dataclass(frozen=True)
class Mutation:
    """One validated copy of a test function: its original's name, what was changed, the copy's
    source (the function's name replaced by :data:`NAME_SLOT`), and the pytest id suffixes
    (``""`` or ``"[param]"``) of the copy's items that failed on the trusted tree."""

    origin: str
    kind: str
    source: str
    fail_items: tuple[str, ...] = ()

    def to_record(self) -> dict[str, Any]:
        return {"origin": self.origin, "kind": self.kind, "source": self.source,
                "fail_items": list(self.fail_items)}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Mutation:
        return cls(str(rec["origin"]), str(rec["kind"]), str(rec["source"]),
                   tuple(str(i) for i in rec.get("fail_items", [])))


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Source:
    """A file's text with byte offsets for ``ast`` positions (which count UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")


def top_level_tests(tree: ast.Module) -> list[ast.FunctionDef]:
    """Top-level ``def test*`` functions (pytest's default ``python_functions``)."""
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]


def _func_start(node: ast.FunctionDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _literals(tree: ast.Module) -> dict[type, list[str]]:
    """Source texts of the file's plain literals by type, to draw replacement values from."""
    out: dict[type, list[str]] = {int: [], float: [], str: []}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in out:
            if isinstance(node.value, str) and ("\n" in node.value or len(node.value) > 60):
                continue
            out[type(node.value)].append(repr(node.value))
    return {k: sorted(set(v)) for k, v in out.items()}


def _literal_value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int | float) \
            and type(node.operand.value) in (int, float):
        return -node.operand.value
    raise ValueError("not a literal")


def _expected_literals(node: ast.AST) -> list[ast.AST]:
    """Literals of an expected value: the node itself, or inside list/tuple/set/dict displays
    (never inside a call: ``approx(0.5)`` changed to ``approx(0.50001)`` need not fail)."""
    try:
        v = _literal_value(node)
        return [node] if v is not None and not isinstance(v, bytes) else []
    except ValueError:
        pass
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [x for e in node.elts for x in _expected_literals(e)]
    if isinstance(node, ast.Dict):
        return [x for e in node.values if e is not None for x in _expected_literals(e)]
    return []


def _new_value(value: Any, quote: str, pool: dict[type, list[str]],
               rng: random.Random) -> str | None:
    if isinstance(value, bool):
        return repr(not value)
    if isinstance(value, int | float):
        others = [t for t in pool.get(type(value), []) if _safe_eval(t) != value]
        near = [value + 1, value - 1, value * 2 + 1] if isinstance(value, int) else \
            [value + 0.5, value * 2 + 1.0, value - 0.25]
        choice = rng.choice(others) if others and rng.random() < 0.6 else repr(rng.choice(near))
        return choice
    if isinstance(value, str):
        others = [t for t in pool.get(str, []) if _safe_eval(t) != value]
        if others and rng.random() < 0.6:
            new = _safe_eval(rng.choice(others))
        elif len(value) >= 2:
            i = rng.randrange(len(value) - 1)
            new = value[:i] + value[i + 1] + value[i] + value[i + 2:]
            if new == value:
                new = value[:-1]
        else:
            new = value + value[:1] if value else "x"
        return _quoted(str(new), quote)
    return None


def _safe_eval(text: str) -> Any:
    return ast.literal_eval(text)


def _quoted(value: str, quote: str) -> str:
    text = repr(value)
    if quote == '"' and text.startswith("'") and '"' not in value and "\\" not in text:
        return '"' + text[1:-1] + '"'
    return text


def _mutations_of(fn: ast.FunctionDef, src: _Source, pool: dict[type, list[str]],
                  rng: random.Random) -> list[tuple[str, int, int, str]]:
    """Candidate edits of one function: (kind, start, end, replacement) in file offsets."""
    edits: list[tuple[str, int, int, str]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            test = node.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1:
                op = type(test.ops[0])
                gap_start = src.span(test.left)[1]
                gap_end = src.span(test.comparators[0])[0]
                gap = src.text(gap_start, gap_end)
                if op in _FLIP:
                    pattern, new = _FLIP[op]
                    m = re.search(pattern, gap)
                    if m:
                        a = gap_start + len(gap[:m.start()].encode("utf-8"))
                        b = gap_start + len(gap[:m.end()].encode("utf-8"))
                        edits.append(("operator", a, b, new))
                if op is ast.Eq:
                    for side in (test.comparators[0], test.left):
                        for lit in _expected_literals(side):
                            a, b = src.span(lit)
                            old = src.text(a, b)
                            new_text = _new_value(_literal_value(lit), old[:1], pool, rng)
                            if new_text is not None and new_text != old:
                                edits.append(("value", a, b, new_text))
                        if edits and edits[-1][0] == "value":
                            break  # the expected side is the one with literals
            elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                a, _ = src.span(test)
                _, b = src.span(test)
                edits.append(("truth", a, b, "(" + src.text(*src.span(test.operand)) + ")"))
            else:
                a, b = src.span(test)
                edits.append(("truth", a, b, "not (" + src.text(a, b) + ")"))
        elif isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and call.args and _is_raises(call.func) \
                        and isinstance(call.args[0], ast.Name):
                    new_exc = _unrelated_exception(call.args[0].id, rng)
                    if new_exc:
                        a, b = src.span(call.args[0])
                        edits.append(("exception", a, b, new_exc))
    return edits


def _is_raises(func: ast.AST) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "raises"
            and isinstance(func.value, ast.Name) and func.value.id == "pytest") or \
        (isinstance(func, ast.Name) and func.id == "raises")


def _unrelated_exception(name: str, rng: random.Random) -> str | None:
    """A built-in exception that is neither a base nor a subclass of ``name`` (None when
    ``name`` is not a built-in exception: its hierarchy is unknown here)."""
    old = getattr(builtins, name, None)
    if not (isinstance(old, type) and issubclass(old, BaseException)):
        return None
    choices = [e for e in _EXCEPTIONS if not issubclass(getattr(builtins, e), old)
               and not issubclass(old, getattr(builtins, e))]
    return rng.choice(choices) if choices else None


def derive(text: str, *, seed: int, per_test: int = PER_TEST) -> list[Mutation]:
    """The candidate copies of every top-level test function of one test file (not validated:
    :func:`plant_for_validation` and the trusted run decide which are kept)."""
    try:
        tree = parse_python(text)
    except SyntaxError:
        return []
    src = _Source(text)
    pool = _literals(tree)
    rng = random.Random(seed)
    out: list[Mutation] = []
    for fn in top_level_tests(tree):
        start = src.offset(_func_start(fn), 0)
        end = src.offset(fn.end_lineno or fn.lineno, fn.end_col_offset or 0)
        edits = _mutations_of(fn, src, pool, rng)
        rng.shuffle(edits)
        kinds_seen: set[str] = set()
        picked: list[tuple[str, int, int, str]] = []
        for e in sorted(edits, key=lambda e: e[0] in kinds_seen):  # varied kinds first
            if len(picked) >= per_test:
                break
            if e[0] in kinds_seen and len({x[0] for x in edits}) > len(kinds_seen):
                continue
            kinds_seen.add(e[0])
            picked.append(e)
        for kind, a, b, new in picked:
            body = (src.data[start:a] + new.encode("utf-8") + src.data[b:end]).decode("utf-8")
            body, n = re.subn(rf"\bdef\s+{re.escape(fn.name)}\b", f"def {NAME_SLOT}", body,
                              count=1)
            if n != 1:
                continue
            try:
                parse_python(body)
            except SyntaxError:
                continue
            out.append(Mutation(fn.name, kind, body))
    return out


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, ast.alias):
            names.add((sub.asname or sub.name).split(".")[0])
    return names


def _needed_names(fn: ast.FunctionDef) -> set[str]:
    """Module names a function needs when it is defined (decorators, defaults, annotations)."""
    roots: list[ast.AST] = [*fn.decorator_list, *fn.args.defaults,
                            *(d for d in fn.args.kw_defaults if d is not None)]
    return {n.id for r in roots for n in ast.walk(r) if isinstance(n, ast.Name)}


def insert_points(text: str, origin: str) -> tuple[list[int], int] | None:
    """Line indexes (0-based) where a copy of ``origin`` may go (every top-level statement
    boundary after the names its definition needs are bound), and the index of the original's
    own first line; None when ``origin`` is not a top-level function of ``text``."""
    tree = parse_python(text)
    body = tree.body
    target = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == origin), None)
    if target is None:
        return None
    need = _needed_names(target)
    bound_at: dict[str, int] = {}
    for i, node in enumerate(body):
        for name in _bound_names(node):
            bound_at.setdefault(name, i)
    first = max([bound_at[n] + 1 for n in need if n in bound_at] or [0])
    last_import = max((i for i, n in enumerate(body) if isinstance(n, ast.Import | ast.ImportFrom)),
                      default=-1)
    first = max(first, last_import + 1)
    lines_total = len(text.splitlines())
    points = []
    for node in body[first:]:
        start = node.lineno - 1
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            start = _func_start(node) - 1  # type: ignore[arg-type]
        points.append(start)
    points.append(lines_total)
    return sorted(set(points)), _func_start(target) - 1


def draw_name(text: str, origin: str, taken: set[str], rng: random.Random) -> str:
    """A test name made of the words of the file's own test names (the original's, with one
    word swapped, added or dropped), not yet used in the file."""
    tree = parse_python(text)
    words = sorted({w for fn in top_level_tests(tree) for w in fn.name.split("_")[1:] if w})
    mine = [w for w in origin.split("_")[1:] if w] or ["case"]
    vocab = [w for w in words if w not in mine] or list(_FILLER_WORDS)
    for _ in range(200):
        parts = list(mine)
        move = rng.random()
        if move < 0.5 and parts:
            parts[rng.randrange(len(parts))] = rng.choice(vocab)
        elif move < 0.8 or len(parts) < 2:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(vocab))
        else:
            parts.pop(rng.randrange(len(parts)))
        name = "test_" + "_".join(parts)
        if name not in taken and name != origin and name.isidentifier():
            return name
        if rng.random() < 0.1:
            vocab = vocab + list(_FILLER_WORDS)
    return f"test_{'_'.join(mine)}_{rng.randrange(10, 99)}"


def taken_names(text: str) -> set[str]:
    tree = parse_python(text)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def _insert(text: str, blocks: list[tuple[int, str]]) -> str:
    """Insert function blocks before the given line indexes (bottom up, so indexes hold)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    tail = [block for at, block in blocks if at >= len(lines)]
    for at, block in sorted((b for b in blocks if b[0] < len(lines)), key=lambda t: -t[0]):
        lines.insert(at, block + "\n\n\n")
    lines += ["\n\n" + block + "\n" for block in tail]
    return "".join(lines)


def plant_for_validation(text: str, mutations: list[Mutation],
                         rng: random.Random) -> tuple[str, dict[str, Mutation]]:
    """Every copy right after its original (the one place sure to define it as the original
    is defined), under a throwaway name; returns the new text and name -> mutation."""
    tree = parse_python(text)
    ends = {fn.name: fn.end_lineno or fn.lineno for fn in top_level_tests(tree)}
    taken = taken_names(text)
    blocks, names = [], {}
    for m in mutations:
        if m.origin not in ends:
            continue
        name = f"test_{m.origin.removeprefix('test').strip('_')}_{rng.getrandbits(40):010x}"
        while name in taken:
            name += "x"
        taken.add(name)
        names[name] = m
        blocks.append((ends[m.origin], m.source.replace(NAME_SLOT, name)))
    return _insert(text, blocks), names


def draw(text: str, mutations: list[Mutation], rng: random.Random,
         max_per_file: int = MAX_PER_FILE) -> tuple[str, list[tuple[str, Mutation]]]:
    """One verification's copies for one file: at most one per original (two copies of one
    test would give the original away as the one they share), up to ``max_per_file``
    originals, each under a name drawn like the file's own and at a random place among the
    file's statements. With two or more copies, at least one goes before its original and one
    after, so no rule by position sorts copies from originals."""
    by_origin: dict[str, list[Mutation]] = {}
    for m in mutations:
        if m.fail_items:
            by_origin.setdefault(m.origin, []).append(m)
    origins = sorted(by_origin)
    rng.shuffle(origins)
    chosen = [(o, rng.choice(by_origin[o])) for o in origins[:max_per_file]]
    taken = taken_names(text)
    placed: list[tuple[int, str, Mutation, list[int], list[int]]] = []
    for origin, m in chosen:
        found = insert_points(text, origin)
        if found is None:
            continue
        points, own = found
        before = [p for p in points if p <= own]
        after = [p for p in points if p > own]
        name = draw_name(text, origin, taken, rng)
        taken.add(name)
        side = before if (before and (not after or rng.random() < 0.5)) else after
        placed.append((rng.choice(side), name, m, before, after))
    if len(placed) >= 2:
        sides = [at in before for at, _, _, before, _ in placed]
        if all(sides) or not any(sides):
            want_before = not sides[0]
            for i, (_at, name, m, before, after) in enumerate(placed):
                other = before if want_before else after
                if other:
                    placed[i] = (rng.choice(other), name, m, before, after)
                    break
    new = _insert(text, [(at, m.source.replace(NAME_SLOT, name)) for at, name, m, _, _ in placed])
    return new, [(name, m) for _, name, m, _, _ in placed]
