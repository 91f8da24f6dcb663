"""The device actor of a gang: build a case's arguments on its device, run the shared tuning path.

One :class:`CaseWorker` per device. The ranks of a case's block are in the case's world
(:meth:`CaseWorker.form`, :mod:`ray_runner.world`: the default group holds exactly them); for each
case every rank imports the target and the argument builder, builds the call's arguments on its
own device and calls ``AutoTuner.tune(..., autotune_pg=<the world>, force=True,
write_cache=False)``: exactly the measuring, agreement and MAX reduction an inline
``autotune_pg`` call of a job of that size runs. The entry dict goes back to the driver, which
merges and writes it (:mod:`ray_runner.merge`).

This module imports neither Ray nor torch at import time; :mod:`ray_runner.gang` wraps the class
with ``ray.remote``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

from triton_dist.errors import CampaignError

from .binaries import collect

__all__ = ["CaseContext", "CaseWorker", "build_args", "identify_case", "load_attr", "load_target"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CaseContext:
    """What an argument builder learns about where it runs: ``builder(case, ctx)``."""

    rank: int
    """This actor's rank in the case's world (0 .. world_size-1; ``torch.distributed.get_rank()``)."""
    world_size: int
    """Ranks of the case's world (the target's ``world_size``)."""
    device: Any
    """The ``torch.device`` to build tensors on."""
    group: Any = None
    """The case's world: the default process group (in ``preflight`` a ``fake`` one, whose
    collectives do nothing)."""


@contextlib.contextmanager
def attribute(rank: int, size: int, step: str) -> Iterator[None]:
    """An exception out of a case's ``step`` on this rank carries where it happened (a note, which
    the driver's failure text shows: ``ray_runner.errors.describe_failure``): the rank, the step
    and the last line of the user's code it passed through. A campaign's failure said only
    "ValueError: boom" (a tester, session 28); another rank's RankFailureError is left as it is."""
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ != "RankFailureError" and hasattr(exc, "add_note"):
            where = _user_line(exc.__traceback__)
            exc.add_note(f"rank {rank} of {size}, {step}" + (f", at {where}" if where else ""))
        raise


def _user_line(tb: Any) -> str | None:
    """``file:line in function`` of the innermost frame outside this project and the libraries."""
    skip = (os.sep + "triton_dist" + os.sep, os.sep + "ray_runner" + os.sep, "site-packages", "dist-packages",
            os.sep + "lib" + os.sep + "python")
    found = None
    for frame, line in traceback.walk_tb(tb):
        name = frame.f_code.co_filename
        if not any(part in name for part in skip) and not name.startswith("<"):
            found = f"{os.path.basename(name)}:{line} in {frame.f_code.co_name}"
    return found


def load_attr(path: str, what: str) -> Any:
    """Import ``module:attr`` (dotted attributes allowed); a CampaignError naming ``what`` if not."""
    module_name, _, attr = path.partition(":")
    try:
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Campaign paths are relative to the working directory, as for `python -m` and for
            # Ray's workers (which get the driver's directory); a script run as `python x.py`
            # lacks it, so look there last before giving up.
            cwd = os.getcwd()
            if exc.name != module_name.split(".")[0] or cwd in sys.path or "" in sys.path:
                raise
            sys.path.append(cwd)
            obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise CampaignError(
            f"{what}: cannot import module {module_name!r} ({type(exc).__name__}: {exc}). The module must "
            "be importable on every node (installed in the image, or under the working directory "
            "that `ray job submit --working-dir .` uploads)."
        ) from exc
    except Exception as exc:  # the module's own code failed while it was imported
        raise CampaignError(
            f"{what}: importing module {module_name!r} raised {type(exc).__name__}: {str(exc)[:300]}. "
            "The module fails at import time: fix it, or point the campaign at another module."
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise CampaignError(f"{what}: module {module_name!r} has no attribute {attr!r}") from exc
    return obj


def load_target(function: str, what: str = "function") -> Any:
    from triton_dist.tune import AutoTuner

    tuner = load_attr(function, what)
    if not isinstance(tuner, AutoTuner):
        raise CampaignError(
            f"{what}: {function} is a {type(tuner).__name__}, not an autotune-decorated function; "
            "point it at a function decorated with @triton_dist.tune.autotune(...)."
        )
    return tuner


def build_args(builder_path: str, case: Mapping[str, Any], ctx: CaseContext) -> tuple[tuple, dict[str, Any]]:
    builder = load_attr(builder_path, "args")
    if not callable(builder):
        raise CampaignError(f"args: {builder_path} is a {type(builder).__name__}, not a callable")
    out = builder(dict(case), ctx)
    if (not isinstance(out, (tuple, list)) or len(out) != 2 or not isinstance(out[0], (tuple, list))
            or not isinstance(out[1], Mapping)):
        raise CampaignError(
            f"args: the builder {builder_path} must return (args tuple, kwargs dict), got "
            f"{type(out).__name__} {out!r:.120}"
        )
    return tuple(out[0]), dict(out[1])


def identify_case(tuner: Any, args: tuple, kwargs: dict[str, Any], world: int) -> dict[str, Any]:
    """Where this call's cache entry lives and what the hit rule compares (``_decide.CallId``),
    for a call that tunes over ``world`` ranks."""
    from triton_dist._prune import kept_for_lookup
    from triton_dist._store import decide as _decide

    key = tuner.key_fn(*args, **kwargs)
    kept = kept_for_lookup(tuner.target, args, kwargs, _decide.stable_key(key))  # a pruned best: not cached
    return _decide.identify(tuner.target, key, world, kept=kept).to_dict()


class _Capture(logging.Handler):
    """Collects the lines of one tuning (the ``triton_dist.tune`` logger) for the driver's log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
        self.lines.append(f"{stamp}.{int(record.msecs):03d} {record.getMessage()}")


def local_device_index(resource: str, visible_env: str | None) -> int:
    """Index of this actor's device among those the process sees.

    Ray normally narrows ``CUDA_VISIBLE_DEVICES`` / ``ASCEND_RT_VISIBLE_DEVICES`` to the actor's
    device (index 0); with ``RAY_EXPERIMENTAL_NOSET_*`` it does not, and the assigned id is used.
    """
    import ray

    ids = ray.get_runtime_context().get_accelerator_ids().get(resource) or []
    if not ids:
        return 0
    visible = os.environ.get(visible_env or "", "")
    names = [v.strip() for v in visible.split(",") if v.strip()]
    if str(ids[0]) in names:
        return names.index(str(ids[0]))
    try:
        return int(ids[0])
    except ValueError:
        return 0


class CaseWorker:
    """One device actor of a gang (wrapped with ``ray.remote`` by :mod:`ray_runner.gang`).

    A gang of G actors serves cases of any world size w <= G: its ranks are cut into blocks of
    w consecutive ranks; a block forms its own world (its ranks' default group) when the driver
    first gives it a case of that size, so the same processes tune cases of every size without
    restarting.
    """

    def __init__(self, rank: int, world_size: int, resource: str) -> None:
        from triton_dist._backends import get_backend

        self.rank = rank
        self.world_size = world_size
        self.backend = get_backend()  # TRITON_DIST_DEVICE is set in the actor's runtime_env
        self.local_index = local_device_index(resource, self.backend.visible_devices_env)
        self.backend.set_device(self.local_index)
        #: (world id, its size, this actor's rank in it): the world this actor is in (see form)
        self.formation: tuple[int, int, int] | None = None
        self._form_error: str | None = None
        self._hosted: Any = None  # the store this actor hosts for the world it forms next (rank 0)
        self._args_key: tuple | None = None
        self._args: tuple[tuple, dict[str, Any]] | None = None
        # pooled gangs (ray_runner/pool.py): rank 0 holds the claim and reaps the idle gang
        self._claim: str | None = None
        self._seen = time.monotonic()  # the last call that did work
        self._busy = 0
        self._pool_idle_s = 0.0

    # ------------------------------------------------------------------ pooled gangs

    def pool_setup(self, pg_name: str, idle_s: float, token: str) -> None:
        """Rank 0 of a pooled gang: hold ``token``'s claim; once unclaimed and idle for
        ``idle_s``, remove the gang's placement group, which ends every actor of the gang."""
        self._claim, self._pool_idle_s, self._seen = token, float(idle_s), time.monotonic()
        threading.Thread(target=self._reap, args=(pg_name,), name="pool-reaper", daemon=True).start()

    def claim(self, token: str) -> bool:
        """Claim the gang for a campaign: False while another campaign holds it."""
        now = time.monotonic()
        if self._claim not in (None, token) and (self._busy or now - self._seen < self._pool_idle_s):
            return False
        self._claim, self._seen = token, now
        return True

    def release(self, token: str) -> None:
        if self._claim == token:
            self._claim, self._seen = None, time.monotonic()

    def _reap(self, pg_name: str) -> None:
        from ray.util import get_placement_group, remove_placement_group

        while True:
            time.sleep(min(1.0, max(self._pool_idle_s / 4, 0.05)))
            idle = time.monotonic() - self._seen
            # a claim whose campaign went silent for idle_s is as good as released
            if not self._busy and idle > self._pool_idle_s:
                log.info("pooled gang %s idle for %.0fs: ending it", pg_name, idle)
                try:
                    remove_placement_group(get_placement_group(pg_name))
                except Exception as exc:  # noqa: BLE001 - removed already: end this actor anyway
                    log.debug("removing %s: %s", pg_name, exc)
                time.sleep(5.0)
                os._exit(0)

    def _enter(self) -> None:
        self._busy += 1
        self._seen = time.monotonic()

    def _leave(self) -> None:
        self._busy -= 1
        self._seen = time.monotonic()

    def node(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "pid": os.getpid()}

    def host_store(self, host: str, timeout_s: float) -> int:
        """Rank 0 of a block: host the store of the block's next world; its port (see form)."""
        from .world import host_store

        self._enter()  # busy: a kept gang's reaper must not end it (torch.distributed's import: seconds)
        try:
            self._hosted = host_store(host, timeout_s)
        finally:
            self._leave()
        return int(self._hosted.port)

    def form(self, fid: int, addr: str, port: int, size: int, rank: int, timeout_s: float) -> None:
        """Make this actor rank ``rank`` of the ``size``-rank world ``fid`` (:mod:`ray_runner.world`):
        the world the next cases of its block run in. Every rank of the block calls it."""
        from .world import form_world

        self.formation, self._form_error = None, None
        self._args_key, self._args = None, None  # tensors of the previous world's case
        self._enter()  # busy: a kept gang's reaper must not end it while it forms (imports: seconds)
        try:
            hosted, self._hosted = (self._hosted if rank == 0 else None), None
            form_world(addr, port, size, rank, local_index=self.local_index, timeout_s=timeout_s,
                       backend=self.backend, hosted=hosted)
        except BaseException as exc:
            self._form_error = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            self._leave()
        self.formation = (fid, size, rank)

    def _world(self, fid: int, size: int) -> CaseContext:
        """The context of a case of ``size`` in world ``fid``; a RankFailureError (retried on a
        fresh gang) when this actor is not in that world (forming it failed)."""
        if self.formation is None or self.formation[0] != fid or self.formation[1] != size:
            from triton_dist.errors import RankFailureError

            raise RankFailureError(
                f"rank {self.rank} of the gang is not in the {size}-rank world {fid} its case needs"
                + (f": forming it failed: {self._form_error}" if self._form_error else ""))
        import torch.distributed as dist

        return CaseContext(self.formation[2], size, self.backend.device(), dist.group.WORLD)

    def _case_args(self, builder: str, case: Mapping[str, Any], ctx: CaseContext) -> tuple[tuple, dict[str, Any]]:
        import json

        key = (builder, json.dumps(case, sort_keys=True, default=str), ctx.world_size, self.formation)
        if self._args_key != key or self._args is None:
            self._args = None  # free the previous case's tensors before building new ones
            self._args = build_args(builder, case, ctx)
            self._args_key = key
        return self._args

    def identify(self, function: str, builder: str, case: Mapping[str, Any], size: int, fid: int) -> dict[str, Any]:
        """Build the case's arguments (kept for :meth:`tune`) and say where its entry lives, in
        the case's world ``fid``. Every rank of the case's block runs it: a builder may use
        ``ctx.group``."""
        entered = time.perf_counter()
        self._enter()
        try:
            ctx = self._world(fid, size)
            tuner = load_target(function)
            with attribute(self.rank, size, f"building the case's arguments ({builder})"):
                args, kwargs = self._case_args(builder, case, ctx)
            with attribute(self.rank, size, "computing the key (key_fn)"):
                return {**identify_case(tuner, args, kwargs, size), "busy_s": time.perf_counter() - entered}
        finally:
            self._leave()

    def tune(self, function: str, builder: str, case: Mapping[str, Any], size: int, fid: int, *,
             known_failures: Mapping[int, str] | None = None, check_correctness: bool = True,
             ship_binaries: bool = False) -> dict[str, Any]:
        """Tune the case in its block's group; ``known_failures`` are candidates an earlier attempt
        found to leave the device unusable (recorded as failed without running them).

        ``busy_s`` in the answer is the time this call kept the rank busy (arguments + tuning):
        the driver's case time minus it is the scheduling overhead of the case."""
        entered = time.perf_counter()
        self._enter()
        try:
            return self._tune(function, builder, case, self._world(fid, size), known_failures,
                              check_correctness, entered, ship_binaries)
        finally:
            self._leave()

    def _tune(self, function: str, builder: str, case: Mapping[str, Any], ctx: CaseContext,
              known_failures: Mapping[int, str] | None, check_correctness: bool, entered: float,
              ship_binaries: bool = False) -> dict[str, Any]:
        tuner = load_target(function)
        with attribute(self.rank, ctx.world_size, f"building the case's arguments ({builder})"):
            args, kwargs = self._case_args(builder, case, ctx)
        group = ctx.group
        capture = _Capture()
        logger = logging.getLogger("triton_dist.tune")
        level, propagate = logger.level, logger.propagate
        logger.addHandler(capture)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        start = time.perf_counter()
        try:
            with attribute(self.rank, ctx.world_size, "tuning"):
                entry = tuner.tune(*args, autotune_pg=group, force=True, write_cache=False,
                                   check_correctness=check_correctness,
                                   known_failures={int(k): v for k, v in (known_failures or {}).items()}, **kwargs)
            # the best config's compiled kernels, for the seeds (issue 23; ray_runner.binaries)
            shipped = collect(tuner, args, kwargs, entry) if ship_binaries else None
        finally:
            logger.removeHandler(capture)
            logger.setLevel(level)
            logger.propagate = propagate
            self._args_key, self._args = None, None
        return {"rank": self.rank, "entry": entry, "log": capture.lines,
                "seconds": time.perf_counter() - start, "busy_s": time.perf_counter() - entered,
                "host": socket.gethostname(), "binaries": shipped}
