"""``python -m ray_runner``: run, validate or pre-flight a pre-tuning campaign.

Exit status: 0 success (a node that left the cluster is reported as lost, not failed); 1 a case
failed, a node was not seeded, or pre-flight found a miss; 2 the campaign file or the command line
is invalid; 3 the cluster cannot run it (Ray missing, no connection, an unwritable cache directory
on the driver or, with ``--seed nodes``, on a node; another run of the campaign is going on; no
node can hold a case's gang: the resource, or world_size of it, or a kind, is missing; for
``run``, when every failed case failed so).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence

from triton_dist.errors import CampaignError, RayNotInstalledError, TritonDistError

from . import _signals

__all__ = ["main"]

log = logging.getLogger("ray_runner")

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INFRA = 0, 1, 2, 3


CAMPAIGN_HELP = "campaign YAML file (fields: docs/campaigns.md)"
ADDRESS_HELP = "Ray address (auto, host:port, ray://host:port); default: RAY_ADDRESS, else an embedded local Ray"


def prog_name() -> str:
    """How this program was started: the ``ray-runner`` console script or ``python -m``."""
    return "ray-runner" if os.path.basename(sys.argv[0] or "").startswith("ray-runner") else "python -m ray_runner"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog_name(),
                                     description="Pre-tune autotuned functions on Ray and seed the caches.",
                                     epilog="Exit status: 0 done; 1 a case failed, a node was not seeded, or "
                                            "preflight found a miss; 2 invalid campaign file or command line; "
                                            "3 the cluster cannot run it (also: no node can hold a case's gang; "
                                            "run: every failed case failed so).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a campaign")
    run.add_argument("campaign", help=CAMPAIGN_HELP)
    run.add_argument("--address", help=ADDRESS_HELP)
    run.add_argument("--cache-dir", help="where merged entries are written (default: TRITON_DIST_AUTOTUNE_DIR "
                                         "or ~/.triton_dist/autotune); with --seed nodes, also every node's root")
    run.add_argument("--seed", choices=("none", "nodes", "shared"), default="none",
                     help="nodes: write the entries into every alive node's cache; shared: into --cache-dir "
                          "(a directory every node mounts); none: only the driver's cache (default)")
    run.add_argument("--force", action="store_true", help="re-tune cases that are already in the cache")
    run.add_argument("--report-dir", metavar="DIR",
                     help="where the report (JSON, Markdown, plot) goes; default: the campaign's report_dir, "
                          "relative to the driver's working directory (under `ray job submit`, Ray's copy of "
                          "--working-dir: pass an absolute DIR there)")
    run.add_argument("--no-binaries", action="store_true",
                     help="with --seed nodes, do not ship the Triton binaries of the best configs into the "
                          "nodes' Triton caches (shipped by default to nodes whose Triton matches)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    run.add_argument("--keep-gangs", type=_seconds(zero=True), default=0.0, metavar="SECONDS",
                     help="keep the gangs alive (idle) for SECONDS after the campaign, for the next campaign "
                          "on this cluster that is also run with --keep-gangs (same code, device, env and gang "
                          "shape) to reuse instead of starting its own; meanwhile they hold their devices (`pool "
                          "stop` ends them). Needs --address or RAY_ADDRESS: an embedded Ray ends with the campaign")

    pool = sub.add_parser("pool", help="list or stop the gangs kept by --keep-gangs")
    pool.add_argument("action", choices=("ls", "stop"),
                      help="ls: list the kept gangs and their state; stop: end them and free their devices")
    pool.add_argument("--address", help="Ray address of the cluster that keeps them (default: RAY_ADDRESS; required)")

    validate = sub.add_parser("validate", help="check a campaign file without running it")
    validate.add_argument("campaign", help=CAMPAIGN_HELP + "; checks every field (and prints how many cases it "
                                                           "expands to)")
    validate.add_argument("--no-import", action="store_true",
                          help="check the file only; do not import the targets and argument builders "
                               "(offline validation, where the code is not installed)")
    validate.add_argument("--import-timeout", type=_seconds(zero=False), default=120.0, metavar="SECONDS",
                          help="bound on importing every target and builder (default 120)")
    validate.add_argument("--address", help="also check the campaign against this running Ray cluster: its "
                                            "accelerator kinds (hardware), and that a node has ray_resource and "
                                            "each case's world_size of it (exit 3 if not; default: RAY_ADDRESS "
                                            "when set, except with --no-import, which stays offline)")

    pre = sub.add_parser("preflight", help="check that every rank of every node will hit the cache")
    pre.add_argument("campaign", help=CAMPAIGN_HELP + "; every case is checked on every node")
    pre.add_argument("--address", help=ADDRESS_HELP)
    pre.add_argument("--cache-dir", help="the cache root to check on every node (default: each node's "
                                         "TRITON_DIST_AUTOTUNE_DIR, else ~/.triton_dist/autotune)")
    pre.add_argument("--timeout", type=_seconds(zero=False), default=600.0, metavar="SECONDS",
                     help="bound on the whole check (default 600): an argument builder or key_fn that hangs "
                          "ends it with an error naming this bound")

    sub.add_parser("schema", help="print the JSON schema of campaign files (docs/campaign.schema.json), "
                                  "for editors and other tools")
    return parser


#: the most seconds a duration flag takes (a week): beyond, a bound that never ends
MAX_SECONDS = 7 * 24 * 3600.0


def _seconds(zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, > 0 (``zero``: >= 0), at most a week."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > MAX_SECONDS:
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds {'>= 0' if zero else '> 0'}, "
                                             f"at most {MAX_SECONDS:g} (a week); got {text!r}")
        return value
    return parse


def _run(args: argparse.Namespace) -> int:
    from .campaign import RunOptions, run_campaign
    from .spec import load_campaign

    campaign = load_campaign(args.campaign)
    if args.keep_gangs < 0:
        raise CampaignError(f"--keep-gangs must be >= 0 seconds, got {args.keep_gangs:g}")
    options = RunOptions(address=args.address, cache_dir=args.cache_dir, seed=args.seed, force=args.force,
                         progress=not args.no_progress, keep_gangs_s=args.keep_gangs, report_dir=args.report_dir,
                         ship_binaries=False if args.no_binaries else None)
    try:
        from tqdm.contrib.logging import logging_redirect_tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        result = run_campaign(campaign, options)
    else:
        with logging_redirect_tqdm(loggers=[logging.getLogger()]):
            result = run_campaign(campaign, options)
    resumed = f" ({result.resumed} of them finished by an earlier run)" if result.resumed else ""
    print(f"campaign {campaign.name}: " + ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
          + f"{resumed} in {result.wall_s:.1f}s")
    # under `ray job submit` the driver runs on the head, in Ray's copy of the working directory,
    # with the head's environment: say exactly where things went (issue 18 item 8)
    print(f"cache root: {result.root} (from {result.root_source}, on {result.driver_host})")
    for path in result.report_paths.values():
        print(f"report: {path}")
    for run in result.failed:
        print(f"FAILED {run.spec.label()}: {run.errors[-1] if run.errors else ''}", file=sys.stderr)
    for error in result.seed_errors:
        print(f"SEED FAILED {error}", file=sys.stderr)
    for lost in (s for s in result.seeded if s.get("lost")):
        print(f"NOT SEEDED {lost.get('address')} (node {str(lost.get('node_id'))[:12]}): it left the cluster "
              "(when it or a replacement joins: preflight, then run again with --seed nodes)", file=sys.stderr)
    for seeded in result.seeded:  # nodes that got entries but not the compiled binaries (issue 23)
        for why in (seeded.get("binaries") or {}).get("skipped", [])[:3]:
            print(f"binaries not shipped to {seeded.get('address') or seeded.get('host')}: {why}")
    log.info("driver peak RSS %.0f MB", _peak_rss_mb())
    if result.unplaceable and not result.seed_errors:
        print(f"error: the cluster cannot run {len(result.failed)} case(s): no node can hold their gangs "
              f"(see above; `validate --address` checks this before a run)", file=sys.stderr)
        return EXIT_INFRA
    return EXIT_OK if result.ok else EXIT_FAILED


def _peak_rss_mb() -> float:
    import resource

    # ru_maxrss is in KiB on Linux (bytes on macOS)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def _validate(args: argparse.Namespace) -> int:
    from .spec import load_campaign

    campaign = load_campaign(args.campaign)
    cases = campaign.cases()
    sizes = sorted({c.world_size for c in cases})
    if not args.no_import:
        from .validate import check_imports

        problems = check_imports(campaign, args.import_timeout)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            print(f"{args.campaign}: INVALID: {len(problems)} target(s) or builder(s) cannot be used",
                  file=sys.stderr)
            return EXIT_INVALID
    checked = "file only (--no-import)" if args.no_import else "targets and builders imported"
    print(f"{args.campaign}: valid campaign {campaign.name!r}: {len(campaign.targets)} target(s), "
          f"{len(cases)} case(s), world sizes {sizes}, device {campaign.device}; {checked}")
    # --no-import is offline: a cluster only when --address asks for one (not an exported RAY_ADDRESS)
    return _validate_hardware(campaign, args.address, use_env=not args.no_import)


def _validate_hardware(campaign: object, address: str | None, use_env: bool = True) -> int:
    """The campaign against the cluster: EXIT_INFRA naming the kinds it lacks and the world sizes
    no node can hold (no node with the resource, or too few of it)."""
    from ._ray import unknown_resource_note
    from .fleet import check_cluster

    asked = getattr(campaign, "hardware", None)
    if not (address or (use_env and os.environ.get("RAY_ADDRESS"))):
        note = unknown_resource_note(getattr(campaign, "ray_resource", None))
        if note:  # a typo passes here and on an embedded Ray: only a cluster would tell
            print(f"warning: {note}", file=sys.stderr)
        if asked is not None:
            print(f"hardware {list(asked)}: not checked against a cluster (pass --address)")
        return EXIT_OK
    plan, resource, unplaceable = check_cluster(campaign, address)  # type: ignore[arg-type]
    present = [k for k in plan.kinds if k is not None]
    if present:
        print("hardware: every case is tuned on " + ", ".join(
            f"{k} ({plan.devices.get(k, 0)} {resource} on {len(plan.nodes.get(k, ()))} node(s))" for k in present))
    elif not plan.absent and not unplaceable:
        print(f"hardware: no accelerator kinds among the nodes with {resource}: every case is tuned once")
    for note in plan.notes(resource):
        print(f"warning: {note}", file=sys.stderr)
    for kind in plan.absent:
        print(f"error: {plan.absent_message(kind, resource)}", file=sys.stderr)
    for problem in unplaceable:
        print(f"error: {problem}", file=sys.stderr)
    if plan.absent or unplaceable:
        print("the cluster cannot run this campaign as it is (exit 3)", file=sys.stderr)
        return EXIT_INFRA
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    import json

    from .spec import campaign_schema

    print(json.dumps(campaign_schema(), indent=2, ensure_ascii=False))
    return EXIT_OK


def _preflight(args: argparse.Namespace) -> int:
    from .preflight import preflight, summarize
    from .spec import load_campaign

    campaign = load_campaign(args.campaign)
    ok, lines = summarize(preflight(campaign, address=args.address, cache_dir=args.cache_dir,
                                    timeout_s=args.timeout))
    print("\n".join(lines))
    print("preflight: every rank hits" if ok else "preflight: MISSES (see above)")
    return EXIT_OK if ok else EXIT_FAILED


def _pool(args: argparse.Namespace) -> int:
    from ._ray import ray_session
    from .pool import list_pooled, stop_pooled

    if not (args.address or os.environ.get("RAY_ADDRESS")):
        print("error: pass --address (or set RAY_ADDRESS): kept gangs live on a running cluster", file=sys.stderr)
        return EXIT_INVALID
    with ray_session(args.address) as ray:
        if args.action == "ls":
            rows = list_pooled(ray)
            for row in rows:
                alive = row.get("actors", row["bundles"])
                health = (f"  {alive}/{row['bundles']} actors alive" + (
                    ": orphaned (its actors died, e.g. with their node)" if alive == 0 else
                    ": broken (not reused)") + "; `pool stop` frees its devices"
                    if alive < row["bundles"] and row["state"] == "CREATED" else "")
                print(f"{row['name']}  {row['bundles']} device(s)  {row['state']}  {row['strategy']}{health}")
            print(f"{len(rows)} kept gang(s)")
        else:
            stopped = stop_pooled(ray)
            print(f"stopped {len(stopped)} kept gang(s)" + "".join(f"\n  {name}" for name in stopped))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    _signals.install()  # `ray job stop` and Kubernetes send SIGTERM: unwind, tear the gangs down
    try:
        return {"run": _run, "validate": _validate, "preflight": _preflight, "pool": _pool,
                "schema": _schema}[args.command](args)
    except CampaignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except RayNotInstalledError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INFRA
    except TritonDistError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INFRA
    except KeyboardInterrupt:
        print("interrupted: gangs torn down; run the campaign again to finish it (cached cases are skipped)",
              file=sys.stderr)
        return 130
    finally:
        _signals.uninstall()


if __name__ == "__main__":
    sys.exit(main())
