"""What a compile pass did (:mod:`triton_dist._measure.compile`), config by config."""

from __future__ import annotations

import dataclasses

__all__ = ["PassResult"]


@dataclasses.dataclass
class PassResult:
    compiled: dict[int, int] = dataclasses.field(default_factory=dict)
    """index -> kernels its host-function call compiled (or found in Triton's caches)"""
    failed: dict[int, str] = dataclasses.field(default_factory=dict)
    """index -> the compile error (the config's failure)"""
    eager: dict[int, str] = dataclasses.field(default_factory=dict)
    """index -> why its host function took no part (it compiles at its first launch)"""
    threads_why: str = ""
    """why the compiles ran on the pass's threads, not in child processes ("": they did not)"""
    children: int = 0
    """child processes forked (one per kernel compiled)"""
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    """per kernel whose child failed or timed out (the parent compiled it): what happened"""
    cached: bool = False
    """the first config's kernels were all in Triton's caches: the others were left alone"""
