"""The report of a campaign over several accelerator kinds: a column per kind, and disagreements.

Per case, per kind: the best config, its time and the speed-up over the default config; and
whether the kinds agree on the best config. Where they do not is the reason one campaign tunes
every kind: a config tuned on one kind would be the wrong one on the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .spec import case_text

__all__ = ["by_case", "kinds_markdown"]


def _cell(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row.get(name) for name in ("status", "best_index", "best_config", "best_ms", "default_ms",
                                             "speedup", "entry_id", "merged_into")}


def by_case(rows: Sequence[dict[str, Any]], kinds: Sequence[str]) -> list[dict[str, Any]]:
    """One record per case with a cell per kind; ``agree`` is False where the kinds that have a
    best config name different ones (None: fewer than two kinds have one)."""
    cases: dict[int, dict[str, Any]] = {}
    for row in rows:
        record = cases.setdefault(row["number"], {
            "number": row["number"], "function": row["function"], "world_size": row["world_size"],
            "case": row["case"], "kinds": {}})
        record["kinds"][row.get("hardware") or ""] = _cell(row)
    out = []
    for number in sorted(cases):
        record = cases[number]
        bests = {kind: cell["best_config"] for kind, cell in record["kinds"].items() if cell["best_config"]}
        record["agree"] = None if len(bests) < 2 else len(set(bests.values())) == 1
        record["kinds"] = {kind: record["kinds"].get(kind) for kind in kinds}
        out.append(record)
    return out


def _shared_digests(kinds: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """digest -> the kinds whose entries carry it, where more than one kind does."""
    owners: dict[str, list[str]] = {}
    for kind in kinds:
        for digest in kind.get("digests", ()):
            owners.setdefault(digest, []).append(kind["hardware"])
    return {digest: names for digest, names in owners.items() if len(names) > 1}


def _ms(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "–"


def _cell_text(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "–"
    if not cell.get("best_config"):
        merged = cell.get("merged_into")
        return f"{cell['status']} (→ case {merged})" if merged is not None else str(cell["status"])
    speedup = f"{cell['speedup']:.2f}×" if cell.get("speedup") else "–"
    return f"{cell['best_config']}; {_ms(cell['best_ms'])} ms; {speedup}".replace("|", "\\|")


def kinds_markdown(report: dict[str, Any]) -> list[str]:
    """Markdown lines: the kinds, a table with a column per kind, and where the kinds disagree."""
    kinds = [k["hardware"] for k in report["hardware"]]
    lines = ["", "## Accelerator kinds", ""]
    for k in report["hardware"]:
        where = (f"{k['devices']} {report['resource']} on {len(k['nodes'])} node(s)" if k["present"]
                 else "ABSENT from the cluster")
        counts = ", ".join(f"{n} {s}" for s, n in sorted(k["counts"].items()))
        digests = ", ".join(f"`{d}`" for d in k.get("digests", ()))
        lines.append(f"- `{k['hardware']}`: {where}; cases: {counts}"
                     + (f"; hardware digest {digests}" if digests else ""))
    shared = _shared_digests(report["hardware"])
    for digest, names in shared.items():
        lines.append(f"- kinds {', '.join(f'`{n}`' for n in names)} have the same hardware digest `{digest}`: "
                     "their entries are the same files (the last kind's win); one of them is enough")
    if len(kinds) < 2:
        return lines  # one kind: the per-case table below is the whole story
    lines += ["", "Each cell: best config; its time; speed-up over the default config.", "",
              "| # | function | W | case | " + " | ".join(f"`{k}`" for k in kinds) + " | same best? |",
              "|---|---|---|---|" + "---|" * len(kinds) + "---|"]
    for record in report["by_case"]:
        agree = {True: "yes", False: "**no**", None: "–"}[record["agree"]]
        lines.append(f"| {record['number']} | `{record['function']}` | {record['world_size']} | "
                     f"`{case_text(record['case'])}` | "
                     + " | ".join(_cell_text(record["kinds"].get(k)) for k in kinds) + f" | {agree} |")
    disagree = [r for r in report["by_case"] if r["agree"] is False]
    lines += ["", "## Where the kinds disagree on the best config", ""]
    if not disagree:
        lines.append("Nowhere: every case tuned on more than one kind has the same best config on each.")
    for record in disagree:
        parts = [f"`{k}` → {cell['best_config']} ({_ms(cell['best_ms'])} ms)"
                 for k, cell in record["kinds"].items() if cell and cell.get("best_config")]
        lines.append(f"- case {record['number']} `{record['function']}` `{case_text(record['case'])}`: "
                     + "; ".join(parts))
    return lines
