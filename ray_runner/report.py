"""The report of a campaign: JSON (everything), Markdown (a table per case), an optional plot.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .scheduler import CACHED, TUNED
from .spec import case_text

if TYPE_CHECKING:
    from .campaign import CampaignResult

__all__ = ["build_report", "config_text", "markdown", "write_report"]

log = logging.getLogger(__name__)

EFFICIENCY_DEFINITION = ("sum over tuned cases of (world_size * case seconds) / (devices * wall seconds); "
                         "wall = the scheduling loop, gang start-up included (Ray start-up, seeding excluded)")


def _value_text(value: Any) -> str:
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "triton.Config" and isinstance(inner, dict):
            kwargs = inner.get("kwargs", {})
            pairs = kwargs.get("dict", []) if isinstance(kwargs, dict) else []
            parts = [f"{k}={_value_text(v)}" for k, v in pairs]
            parts += [f"{name}={inner[name]}" for name in ("num_warps", "num_stages") if name in inner]
            return ", ".join(parts)
        if tag == "tuple" and isinstance(inner, list):
            return "(" + ", ".join(_value_text(v) for v in inner) + ")"
        if tag == "dict" and isinstance(inner, list):
            return "{" + ", ".join(f"{_value_text(k)}: {_value_text(v)}" for k, v in inner) + "}"
        if tag == "float":
            return str(inner)
        if tag == "repr":
            return str(inner).split(":", 1)[-1]
    if isinstance(value, list):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def config_text(config: Any) -> str:
    """A short readable form of an encoded config (``BLOCK=256, num_warps=4``)."""
    if not isinstance(config, dict):
        return str(config)
    if len(config) == 1:
        (name, value), = config.items()
        if isinstance(value, dict) and "triton.Config" in value:
            return _value_text(value)
    return ", ".join(f"{k}={_value_text(v)}" for k, v in config.items())


def _case_row(run: Any) -> dict[str, Any]:
    spec, entry = run.spec, run.entry or {}
    best = entry.get("best") or {}
    best_ms, default_ms = best.get("time_ms"), entry.get("default_time_ms")
    speedup = default_ms / best_ms if best_ms and default_ms else None
    return {
        "number": spec.number,
        "target": spec.target_index,
        "function": spec.target.function,
        "world_size": spec.world_size,
        "case": spec.case,
        "status": run.status,
        "attempts": run.attempts,
        "retries": max(0, run.attempts - 1),
        "errors": list(run.errors),
        "known_failures": {str(k): v for k, v in run.known_failures.items()},
        "key": entry.get("key") or (run.identity or {}).get("key"),
        "entry_id": entry.get("id") or (run.identity or {}).get("id"),
        "path": run.path,
        "best_index": best.get("index"),
        "best_config": config_text(best.get("config")) if best else None,
        "best_ms": best_ms,
        "default_ms": default_ms,
        "speedup": speedup,
        "seconds": round(run.seconds, 3) if run.seconds is not None else None,
        "busy_seconds": round(run.busy_seconds, 3),
        "overhead_s": round(run.overhead_s, 4) if run.overhead_s is not None else None,
        "gang": run.gang,
        "ranks": list(run.ranks),
        "host": run.host,
        "nodes": list(run.nodes),
        "merged_into": run.merged_into,
    }


def build_report(result: CampaignResult) -> dict[str, Any]:
    rows = [_case_row(run) for run in result.runs]
    tuned = [r for r in result.runs if r.status == TUNED and r.seconds is not None]
    devices = sum(result.capacity.values())
    busy = sum(r.world_size * r.seconds for r in tuned)
    wall = result.wall_s
    overheads = [r.overhead_s for r in tuned if r.overhead_s is not None]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {
        "campaign": result.campaign.name,
        "source": result.campaign.source,
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ok": result.ok,
        "interrupted": result.interrupted,
        "device": result.kind,
        "resource": result.resource,
        "cache_dir": result.root,
        "capacity": result.capacity,
        "devices": devices,
        "wall_s": round(wall, 3),
        "counts": counts,
        "sum_case_s": round(sum(r.seconds for r in tuned), 3),
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
    }


def _ms(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "–"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Campaign `{report['campaign']}`",
        "",
        f"- device: {report['device']} (Ray resource `{report['resource']}`, {report['devices']} in the cluster)",
        f"- cache: `{report['cache_dir']}`",
        "- cases: " + ", ".join(f"{n} {s}" for s, n in sorted(report["counts"].items())),
        f"- wall time: {report['wall_s']:.1f} s; efficiency {report['efficiency']} ({report['efficiency_definition']})",
        "",
        "| # | function | W | case | status | best config | best ms | default ms | speed-up | retries | time s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["cases"]:
        speedup = f"{row['speedup']:.2f}×" if row["speedup"] else "–"
        best = (row["best_config"] or "–").replace("|", "\\|")
        lines.append(
            f"| {row['number']} | `{row['function']}` | {row['world_size']} | `{case_text(row['case'])}` | "
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
        lines += ["", "## Seeded caches", "", "| node | root | written | already there | errors |", "|---|---|---|---|---|"]
        for s in report["seeded"]:
            lines.append(f"| {s.get('address') or s.get('host') or '–'} | `{s.get('root')}` | {s.get('written')} | "
                         f"{s.get('unchanged')} | {len(s.get('errors', []))} |")
        shipped = [s for s in report["seeded"] if s.get("binaries")]
        if shipped:  # issue 23: the winners' compiled binaries in each node's Triton cache
            lines += ["", "| node | Triton cache | binaries installed | already there | skipped (would recompile) |",
                      "|---|---|---|---|---|"]
            lines += [f"| {s.get('address') or s.get('host') or '–'} | `{s['binaries']['dir']}` | "
                      f"{s['binaries']['installed']} | {s['binaries']['unchanged']} | {len(s['binaries']['skipped'])} |"
                      for s in shipped]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> bool:
    """A bar chart of the speed-up per case; False when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    except ImportError:
        return False
    rows = [r for r in report["cases"] if r["status"] in (TUNED, CACHED) and r["speedup"]]
    if not rows:
        return False
    fig = Figure(figsize=(max(6.0, 0.5 * len(rows) + 2), 4))
    ax = fig.subplots()
    ax.bar(range(len(rows)), [r["speedup"] for r in rows])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [str(r["number"]) for r in rows])
    ax.set_xlabel("case")
    ax.set_ylabel("speed-up over config_space[0]")
    ax.set_title(f"{report['campaign']} ({report['device']})")
    fig.tight_layout()
    fig.savefig(path)
    return True


def write_report(result: CampaignResult, report_dir: str | None = None) -> dict[str, str]:
    """Write ``<report_dir>/<name>.json`` and ``.md`` (and ``.png`` with matplotlib); returns
    their absolute paths. ``report_dir`` overrides the campaign's (``--report-dir``)."""
    report = build_report(result)
    directory = Path(report_dir or result.campaign.report_dir).expanduser().absolute()
    paths: dict[str, str] = {}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        json_path = directory / f"{result.campaign.name}.json"
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        paths["json"] = str(json_path)
        md_path = directory / f"{result.campaign.name}.md"
        md_path.write_text(markdown(report), encoding="utf-8")
        paths["markdown"] = str(md_path)
        png_path = directory / f"{result.campaign.name}.png"
        # an older run's plot must not sit next to this report (e.g. every case failed now)
        png_path.unlink(missing_ok=True)
        if plot(report, png_path):
            paths["plot"] = str(png_path)
    except OSError as exc:  # the cache is what matters; a report that cannot be saved is a warning
        log.warning("could not write the campaign report under %s: %s", directory, exc)
    return paths
