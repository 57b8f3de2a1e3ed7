"""Text helpers for terminal tables."""

from termtext.width import char_width, display_width, ellipsize, pad

__all__ = ["char_width", "display_width", "ellipsize", "pad"]
