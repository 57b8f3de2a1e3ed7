"""assay: evidence-first evals of models and coding agents on your own tasks."""

from assay.version import __version__

__all__ = ["__version__"]
