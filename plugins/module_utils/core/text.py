# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the user gave, echoed in a message: never more than its first characters.

A bad name or value can be any length (a 5000-character secret name, a key pasted in by
mistake); a message that repeats it whole buries what it says. Every message that quotes user
input passes it through ``shorten`` (as text) or ``quote`` (in quotes, as Python's ``repr``
writes it): up to ``LIMIT`` characters are kept, then ``... (N characters)`` says how long the
whole was.

Pure Python, no imports: tasks/hostside/nodeside.py and the other files sent to hosts do not use it.
"""

from __future__ import annotations

LIMIT = 60


def shorten(text: object, limit: int = LIMIT) -> str:
    """``text`` whole when it has at most ``limit`` characters, else its first ``limit`` and
    how long it is: ``aaaa... (5000 characters)``."""
    text = text if isinstance(text, str) else str(text)
    if len(text) <= limit:
        return text
    return "%s... (%d characters)" % (text[:limit], len(text))


def quote(text: object, limit: int = LIMIT) -> str:
    """``text`` quoted as ``repr`` quotes it (control characters escaped), shortened as
    ``shorten`` does: ``'aaaa'... (5000 characters)``."""
    text = text if isinstance(text, str) else str(text)
    if len(text) <= limit:
        return repr(text)
    return "%r... (%d characters)" % (text[:limit], len(text))
