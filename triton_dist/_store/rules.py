"""The date of the rules by which entries are named and their configs written (``rules``).

An entry's id hashes the function's source hash, the hardware digest and the key's text, and a
hit finds its best config by its JSON text. When the project changes how any of those is made
(what the source hash counts, how a key or a config value is written), an entry written before
names another id, or its configs read otherwise, although the function is unchanged: the version
after the change tunes such keys once more. Every triton_dist records ``"triton_dist": "0.1.0"``
(the package version did not move with these changes), so an operator upgrading a shared cache
root was told "the function's source changed since the entry was tuned" (a tester, 2026-12-05).
Entries now record :data:`RULES`; bump it, with a line in :data:`CHANGES`, with any such change.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHANGES", "RULES", "note"]

#: the date of this version's rules (an entry's ``rules`` field)
RULES = "2026-12-07"

#: the changes of the rules, newest first: (date, what changed since the rules before)
CHANGES = (
    ("2026-12-07", "the module constants a host function reads count as its module's source makes them, never "
                   "by the value a process holds: a computed global by its statement whatever it holds (a "
                   "logger, a device, a buffer only the leader makes), a name bound only in a block or bound "
                   "again (for NAME in ...) by its name, and not a name a def, class or import binds, one "
                   "imported from a module without Python source (from math import pi) or set from elsewhere"),
    ("2026-12-06", "the module constants a host function reads count in its source hash (by value, statement "
                   "or name: never a value a process makes for itself), and a Python "
                   "function in a config (a value, a triton.Config's pre_hook) is written by its name and a "
                   "digest of its source"),
    ("2026-12-05", "a kernel counts with the @triton.jit helpers it calls and the constants it reads, "
                   "kernels reached as attributes count, and a Triton kernel in a config is written by its "
                   "name and a digest of its source"),
    ("2026-12-04", "the function's qualified name is part of the source hash, and keys that Python holds "
                   "equal are written alike (2.0 as 2)"),
)


def note(entry: dict[str, Any]) -> str:
    """Why ``entry`` may have been written under other rules than this triton_dist's ("" when it
    records this version's): the words of a miss that an upgrade (or a rollback) can explain."""
    theirs = entry.get("rules")
    if theirs == RULES:
        return ""
    fix = ("this version tunes such a key once more and writes its own entry, which the other version's "
           "jobs leave alone (a cache-only job: seed the cache with a campaign run by this version)")
    if not isinstance(theirs, str):
        changes = "; ".join(f"{date}: {what}" for date, what in CHANGES)
        return (f"the entry records no rules date, so a triton_dist older than {RULES} may have written it, "
                f"which named entries and wrote configs otherwise ({changes}): the function may be unchanged; "
                + fix)
    if theirs < RULES:
        changes = "; ".join(f"{date}: {what}" for date, what in CHANGES if date > theirs)
        return (f"the entry was written by an older triton_dist (rules of {theirs[:20]}; this one's are of "
                f"{RULES}: {changes or 'see docs/cache.md'}): the function may be unchanged; " + fix)
    return (f"the entry was written by a newer triton_dist (rules of {theirs[:20]}; this one's are of {RULES}), "
            "which names entries and writes configs otherwise: the function may be unchanged; " + fix)
