"""URL slugs for article titles."""

from slugs.slugify import slugify

__all__ = ["slugify"]
