"""The report of a campaign: JSON (everything), Markdown (a table per case), an optional plot.

Built from the campaign's results stream (:mod:`ray_runner.results`) once the run is over: every
case of the campaign file gets its last row (this run's, or an earlier run's when the campaign
was resumed; ``not run`` when no run finished it). Reading 10,000 rows and writing the report
takes about a second; above :data:`PLOT_BARS_MAX` cases the plot is a histogram of the speed-ups
(a bar per case would take a minute to draw and nobody could read it).

Per case: the best config, its time, the default config's (``config_space[0]``) time, the
speed-up, attempts and failures. Per campaign: wall time, gang start-up times and the efficiency
of the schedule::

    efficiency = Σ_tuned cases (world_size × case seconds) ÷ (devices × wall seconds)

i.e. Σ(single-gang case time) ÷ (gangs × wall) with gangs counted in devices, so that world
sizes mix: 1.0 means every device tuned something the whole time; gang start-up, idle tails and
failed attempts lower it. A case's seconds run from its dispatch to its last rank's result
(argument building, identification and tuning); the driver writes the entry while the ranks
run their next case. ``overhead_s``: of a case's seconds, what its ranks did not spend on it
(dispatch, transfers; the slowest rank's own time per phase is what they spent), the per-case
scheduling overhead; ``gangs.start_device_s``: Σ start-up × gang size, what start-up cost in devices.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .report_kinds import by_case, kinds_markdown
from .results import case_id, case_row, config_text, read_rows, row_key
from .scheduler import CACHED, INTERRUPTED, TUNED
from .spec import case_text

if TYPE_CHECKING:
    from .campaign import CampaignResult

__all__ = ["build_report", "config_text", "markdown", "write_report"]

#: up to this many cases the plot has a bar per case; beyond, a histogram of the speed-ups
PLOT_BARS_MAX = 200
#: status in the report of a case that no run finished (the campaign was interrupted)
NOT_RUN = "not run"

log = logging.getLogger(__name__)

EFFICIENCY_DEFINITION = ("sum over tuned cases of (world_size * case seconds) / (devices * wall seconds); "
                         "wall = the scheduling loop, gang start-up included (Ray start-up, seeding excluded)")


def _not_run(spec: Any) -> dict[str, Any]:
    """The row of a case no run finished (the campaign was interrupted before it)."""
    return {"number": spec.number, "case_id": case_id(spec), "target": spec.target_index,
            "function": spec.target.function, "world_size": spec.world_size, "case": spec.case,
            "status": NOT_RUN, "attempts": 0, "retries": 0, "errors": [], "best_config": None,
            "best_ms": None, "default_ms": None, "speedup": None, "seconds": None, "run": None}


def _rows(result: CampaignResult) -> Iterator[dict[str, Any]]:
    """Every case of the campaign in order: its last row in the results stream (this run's or an
    earlier one's), else a ``not run`` row; without a stream, the result's runs."""
    if not result.results_path:  # a result made in memory (no stream): its runs are the rows
        for run in result.runs:
            yield {**case_row(run), "run": result.run}
        return
    found, _ = read_rows(Path(result.results_path), run=result.run)
    kinds = [k["hardware"] for k in result.hardware] or [None]  # a row per case per accelerator kind
    for spec in result.campaign.cases():
        cid = case_id(spec)
        for kind in kinds:
            row = found.pop(row_key(cid, kind), None)
            if row is None:
                row = {**_not_run(spec), "hardware": kind}
            row["number"] = spec.number  # the campaign file may have been edited between runs
            yield row


def _kinds(hardware: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The accelerator kinds of the campaign, each with how its cases ended and its entries'
    hardware digests, from the rows (resumed ones included: the driver keeps no entries)."""
    out = []
    for kind in hardware:
        mine = [row for row in rows if row.get("hardware") == kind["hardware"]]
        digests = {row["digest"] for row in mine if row.get("digest") and row["status"] in (TUNED, CACHED)}
        counts: dict[str, int] = {}
        for row in mine:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        out.append({**kind, "counts": counts, "digests": sorted(digests | set(kind.get("digests", ())))})
    return out


def build_report(result: CampaignResult) -> dict[str, Any]:
    rows = list(_rows(result))
    devices = sum(result.capacity.values())
    wall = result.wall_s
    counts: dict[str, int] = {}
    resumed = sum_case = busy = 0.0
    overheads = []
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
        if row.get("run") is not None and row["run"] != result.run:
            resumed += 1
        elif row["status"] == TUNED and row.get("seconds") is not None:
            sum_case += row["seconds"]
            busy += row["world_size"] * row["seconds"]
            if row.get("overhead_s") is not None:
                overheads.append(row["overhead_s"])
    return {
        "campaign": result.campaign.name,
        "source": result.campaign.source,
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ok": result.ok,
        "interrupted": result.interrupted,
        "device": result.kind,
        "resource": result.resource,
        "cache_dir": result.root,
        "results": result.results_path,
        "run": result.run,
        "resumed": int(resumed),
        "capacity": result.capacity,
        "devices": devices,
        "wall_s": round(wall, 3),
        "counts": counts,
        "sum_case_s": round(sum_case, 3),
        "busy_device_s": round(busy, 3),
        "efficiency": round(busy / (devices * wall), 4) if devices and wall > 0 else None,
        "efficiency_definition": EFFICIENCY_DEFINITION,
        "overhead_s_median": round(statistics.median(overheads), 4) if overheads else None,
        "gangs": {
            "started": result.stats.get("gangs_started", 0),
            "reused": result.stats.get("gangs_reused", 0),
            "sizes": result.stats.get("gang_sizes", []),
            "start_s": result.stats.get("gang_start_s", []),
            "start_device_s": round(result.stats.get("gang_start_device_s", 0.0), 3),
            "max_devices_held": result.stats.get("max_devices_held", 0),
            "device_seconds_held": round(result.stats.get("device_seconds", 0.0), 3),
        },
        "seeded": result.seeded,
        "cases": rows,
        # several accelerator kinds (ray_runner.report_kinds): the kinds, a column per kind per case
        "hardware": _kinds(result.hardware, rows),
        "by_case": by_case(rows, [k["hardware"] for k in result.hardware]) if result.hardware else [],
    }


def _ms(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "–"


def markdown(report: dict[str, Any]) -> str:
    counts = report["counts"]
    stopped = ([f"- **interrupted** (SIGTERM, Ctrl-C or `ray job stop`): {counts.get(INTERRUPTED, 0)} case(s) were "
                f"running and did not finish, {counts.get(NOT_RUN, 0)} were not run; running the campaign again "
                "finishes it (the finished cases are resumed)"] if report.get("interrupted") else [])
    lines = [
        f"# Campaign `{report['campaign']}`" + (" (interrupted)" if report.get("interrupted") else ""),
        "",
        *stopped,
        f"- device: {report['device']} (Ray resource `{report['resource']}`, {report['devices']} in the cluster)",
        f"- cache: `{report['cache_dir']}`",
        "- cases: " + ", ".join(f"{n} {s}" for s, n in sorted(report["counts"].items())),
        f"- wall time: {report['wall_s']:.1f} s; efficiency {report['efficiency']} ({report['efficiency_definition']})",
        *([f"- {report['resumed']} case(s) finished by an earlier run of this campaign (run {report['run']} "
           f"resumed from `{report['results']}`)"] if report.get("resumed") else []),
        *([f"- {report['plot_note']}"] if report.get("plot_note") else []),
        "",
    ]
    kinds = bool(report.get("hardware"))
    if kinds:
        lines += kinds_markdown(report) + ["", "## Every case on every kind", ""]
    lines += [
        "| # | " + ("kind | " if kinds else "") + "function | W | case | status | best config | best ms | "
        "default ms | speed-up | retries | time s |",
        "|---|" + ("---|" if kinds else "") + "---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["cases"]:
        speedup = f"{row['speedup']:.2f}×" if row["speedup"] else "–"
        best = (row["best_config"] or "–").replace("|", "\\|")
        kind = f"`{row.get('hardware')}` | " if kinds else ""
        lines.append(
            f"| {row['number']} | {kind}`{row['function']}` | {row['world_size']} | `{case_text(row['case'])}` | "
            f"{row['status']} | {best} | {_ms(row['best_ms'])} | {_ms(row['default_ms'])} | {speedup} | "
            f"{row['retries']} | {row['seconds'] if row['seconds'] is not None else '–'} |"
        )
    merged = [row for row in report["cases"] if row.get("merged_into") is not None]
    if merged:
        lines += ["", "## Merged cases (same cache entry as an earlier case; not tuned again)", ""]
        lines += [f"- case {row['number']} `{case_text(row['case'])}` → case {row['merged_into']} "
                  f"(key `{row['key']}`)" for row in merged]
    failures = [row for row in report["cases"] if row["errors"]]
    if failures:
        lines += ["", "## Failures and retries", ""]
        for row in failures:
            lines.append(f"- case {row['number']} ({row['status']}):")
            lines += [f"  - {e.splitlines()[0][:300] if e else ''}" for e in row["errors"]]
    if report["seeded"]:
        lines += ["", "## Seeded caches", "", "| node | kind | root | written | already there | errors |",
                  "|---|---|---|---|---|---|"]
        for s in report["seeded"]:
            kind = s.get("hardware") or ("every kind" if "hardware" in s else "–")
            node = f"{s.get('address') or s.get('host') or '–'}" + (
                f" ({s['node_id'][:12]})" if s.get("node_id") else "")
            errors = "left the cluster: not seeded" if s.get("lost") else len(s.get("errors", []))
            lines.append(f"| {node} | {kind} | `{s.get('root')}` | "
                         f"{s.get('written')} | {s.get('unchanged')} | {errors} |")
        failed = [s for s in report["seeded"] if s.get("errors") or s.get("lost")]
        if failed:  # the text, not only a count: the runbook sends operators to this file (a tester)
            lines += ["", "Nodes not seeded in full:", ""]
            for s in failed:
                lines.append(f"- {s.get('address') or s.get('host') or '–'}"
                             + (f" ({s['node_id'][:12]})" if s.get("node_id") else "") + ":")
                if s.get("lost"):
                    lines.append(f"  - left the cluster ({s['lost'][:300]}): when it or a replacement joins, "
                                 "`preflight` names it and running the campaign again with `--seed nodes` seeds it")
                lines += [f"  - {e.splitlines()[0][:300] if e else ''}" for e in s.get("errors", [])[:5]]
                if len(s.get("errors", [])) > 5:
                    lines.append(f"  - ... {len(s['errors']) - 5} more in the JSON report")
        shipped = [s for s in report["seeded"] if s.get("binaries")]
        if shipped:  # issue 23: the winners' compiled binaries in each node's Triton cache
            lines += ["", "| node | Triton cache | binaries installed | already there | skipped (would recompile) |",
                      "|---|---|---|---|---|"]
            lines += [f"| {s.get('address') or s.get('host') or '–'} | `{s['binaries']['dir']}` | "
                      f"{s['binaries']['installed']} | {s['binaries']['unchanged']} | {len(s['binaries']['skipped'])} |"
                      for s in shipped]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> bool:
    """The speed-up per case: a bar per case up to :data:`PLOT_BARS_MAX` cases, a histogram of
    the speed-ups beyond (a figure's cost stays flat in the case count); False without
    matplotlib or without a speed-up to show."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    except ImportError:
        return False
    rows = [r for r in report["cases"] if r["status"] in (TUNED, CACHED) and r.get("speedup")]
    if not rows:
        return False
    bars = len(rows) <= PLOT_BARS_MAX
    fig = Figure(figsize=(min(max(6.0, 0.5 * len(rows) + 2), 24.0) if bars else 7.0, 4))
    ax = fig.subplots()
    speedups = [r["speedup"] for r in rows]
    if bars:
        ax.bar(range(len(rows)), speedups)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        step = max(1, len(rows) // 40)  # at most ~40 labels: drawing thousands of tick labels takes seconds
        ax.set_xticks(range(0, len(rows), step), [f"{r['number']}" + (f"/{r['hardware']}" if r.get("hardware") else "")
                                                  for r in rows[::step]])
        ax.set_xlabel("case")
        ax.set_ylabel("speed-up over config_space[0]")
    else:
        ax.hist(speedups, bins=min(60, max(10, len(rows) // 50)))
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_xlabel("speed-up over config_space[0]")
        ax.set_ylabel(f"cases (of {len(rows)})")
    ax.set_title(f"{report['campaign']} ({report['device']})")
    fig.tight_layout()
    fig.savefig(path)
    return True


def _write_json(path: Path, report: dict[str, Any]) -> None:
    """The report as JSON: the summary indented, then one case per line (``json.dumps`` with an
    indent runs in pure Python: 10,000 indented rows would take seconds)."""
    head = {k: v for k, v in report.items() if k != "cases"}
    text = json.dumps(head, indent=2, default=str)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:-2] + ',\n  "cases": [')
        for i, row in enumerate(report["cases"]):
            f.write(("\n    " if i == 0 else ",\n    ") + json.dumps(row, default=str))
        f.write("\n  ]\n}\n")


def write_report(result: CampaignResult, report_dir: str | None = None) -> dict[str, str]:
    """Write ``<report_dir>/<name>.json`` and ``.md`` (and ``.png`` with matplotlib), from the
    campaign's results stream; returns their absolute paths. ``report_dir`` overrides the
    campaign's (``--report-dir``)."""
    report = build_report(result)
    if sum(1 for r in report["cases"] if r.get("speedup")) > PLOT_BARS_MAX:
        report["plot_note"] = (f"more than {PLOT_BARS_MAX} cases: the plot is a histogram of the speed-ups; "
                               "every case's speed-up is in the table and the JSON")
    directory = Path(report_dir or result.campaign.report_dir).expanduser().absolute()
    paths: dict[str, str] = {}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        json_path = directory / f"{result.campaign.name}.json"
        _write_json(json_path, report)
        paths["json"] = str(json_path)
        md_path = directory / f"{result.campaign.name}.md"
        md_path.write_text(markdown(report), encoding="utf-8")
        paths["markdown"] = str(md_path)
        png_path = directory / f"{result.campaign.name}.png"
        # an older run's plot must not sit next to this report (e.g. every case failed now)
        png_path.unlink(missing_ok=True)
        if plot(report, png_path):
            paths["plot"] = str(png_path)
        if result.results_path:
            paths["results"] = result.results_path
    except OSError as exc:  # the cache is what matters; a report that cannot be saved is a warning
        log.warning("could not write the campaign report under %s: %s", directory, exc)
    return paths
