"""Turn a title into a lowercase, separator-joined URL slug."""

import re

# Runs of anything that is not a letter or digit (underscores included).
_NOT_WORD = re.compile(r"[\W_]+")


def slugify(text, separator="-", max_length=None):
    """Return a slug for ``text``.

    Letters and digits of every script are kept (lowercased); every run of
    other characters becomes one ``separator``. With ``max_length`` the slug
    is shortened at a separator so that no word is cut in half.
    """
    slug = _NOT_WORD.sub(separator, text.lower()).strip(separator)
    if max_length is not None and len(slug) > max_length:
        cut = slug[:max_length]
        if slug[max_length] != separator and separator in cut:
            cut = cut.rsplit(separator, 1)[0]
        slug = cut.strip(separator)
    return slug
