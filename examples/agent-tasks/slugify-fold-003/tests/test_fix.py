"""Hidden behaviour tests for slugify-fold-003."""

import unicodedata

from slugs import slugify


def nfd(text):
    return unicodedata.normalize("NFD", text)


def test_precomposed_accents_are_folded():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_decomposed_accents_are_folded():
    assert slugify(nfd("Crème Brûlée")) == "creme-brulee"


def test_ring_and_umlaut():
    assert slugify("Ångström") == "angstrom"


def test_decomposed_tilde():
    assert slugify(nfd("São Paulo")) == "sao-paulo"


def test_decomposed_cyrillic_is_recomposed_not_split():
    assert slugify(nfd("Йошкар-Ола")) == "йошкар-ола"


def test_decomposed_japanese_is_recomposed_not_split():
    assert slugify(nfd("ガイドブック")) == "ガイドブック"
