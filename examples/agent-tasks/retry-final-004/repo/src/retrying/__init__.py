"""Retry a call with capped exponential backoff."""

from retrying.core import backoff_delays, retry

__all__ = ["backoff_delays", "retry"]
