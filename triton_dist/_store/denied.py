"""Cache files this user may not read: their permissions (another user's 0600 entry in a shared
root, a ``chmod 000``), not their bytes.

Every reader words such a file's "why unusable" with :data:`DENIED` (:func:`why_denied`), so that
the tools tell it from a corrupt file (:func:`denied`): ``prune`` keeps it (it is another user's
data, and nothing says it is bad), ``verify`` calls it unreadable, ``ls`` and ``show`` name it
with the fix (``triton_dist._cli.access``). The tuner treats it as a miss, as any unusable file.
See docs/cache.md.
"""

from __future__ import annotations

__all__ = ["DENIED", "MODE", "denied", "why_denied"]

#: the words that every "why unusable" of a file this user may not read holds
DENIED = "this user may not read it"

#: the mode the cache writes its files with (entries, history, packs): what the fix restores
MODE = "644"


def why_denied(exc: PermissionError) -> str:
    """The "why unusable" of a file that opening or reading raised ``exc`` for."""
    return f"{DENIED} ({type(exc).__name__}: {exc.strerror or exc}): its permissions, not its bytes"


def denied(why: str | None) -> bool:
    """Whether ``why`` (a file's reason for being unusable) says this user may not read it:
    not a corrupt file, and maybe another user's, which ``prune`` keeps."""
    return bool(why) and DENIED in str(why)
