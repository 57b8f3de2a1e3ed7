"""The public API must match public-api.json exactly (see README, "API stability")."""

import inspect
import json
from pathlib import Path

import semverlite

CONTRACT = json.loads((Path(__file__).resolve().parents[1] / "public-api.json").read_text())


def _plain_signature(func):
    # Annotations are not part of the contract; names, kinds, order and defaults are.
    signature = inspect.signature(func)
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def test_exported_names_match_contract():
    expected = set(CONTRACT["functions"]) | set(CONTRACT["classes"])
    assert set(semverlite.__all__) == expected


def test_function_signatures_match_contract():
    for name, expected in CONTRACT["functions"].items():
        assert _plain_signature(getattr(semverlite, name)) == expected, name


def test_class_fields_match_contract():
    for name, spec in CONTRACT["classes"].items():
        assert list(getattr(semverlite, name)._fields) == spec["fields"], name
