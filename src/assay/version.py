"""assay's version, in a module of its own so the lowest layers can name it without importing
the library API."""

__version__ = "0.1.0"
