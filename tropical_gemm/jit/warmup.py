"""Ahead-of-time compilation: fill the disk cache before anyone asks for a kernel.

Useful for images, clusters and CI: compile the kernels a workload needs for
the GPUs it will meet (``arch=["sm_80", "sm_90"]``) on any machine, GPU or
not, then ship the cache directory or a bundle (``tropical_gemm.jit.bundle``).

Compiles run in threads: NVRTC releases the GIL while it works, and each
kernel is a separate program, so N workers give close to N times the rate
without the start-up cost of processes.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, NamedTuple, Sequence, Union

from .cache import BuildOutcome
from .cache.config import comma_list
from .compiler import ArchLike, Target, resolve_target
from .registry import Registry, current_device, default_registry, device_target
from .spec import KernelSpec, catalogue

#: ``progress(done, total, spec, target)`` after each kernel is in the cache.
Progress = Callable[[int, int, KernelSpec, Target], None]

Names = Union[str, Iterable[str], None]

#: NVRTC needs a few hundred MB per concurrent compile; more threads than this
#: rarely help and can exhaust memory on many-core hosts.
MAX_DEFAULT_WORKERS = 16


class NoGpuForArchError(RuntimeError):
    """``warmup`` was asked for the current GPU's architecture, and there is no usable GPU."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"no usable CUDA GPU to take the architecture from ({cause}); "
                         "pass arch explicitly, e.g. arch='sm_90' or arch=['sm_80', 'sm_90']")
        self.cause = cause

    def __reduce__(self) -> tuple:
        # ``args`` holds the whole message; rebuilt from it, the message would be wrapped twice.
        return type(self), (self.cause,)


class NotStored(NamedTuple):
    """A kernel that was compiled but is not in the disk cache, and why."""

    name: str
    target: str
    reason: str


class WarmupResult(list):  # type: ignore[type-arg]
    """The specs warmed (a list, as before), and what happened to each build.

    ``compiled`` + ``already_cached`` is every build; ``stored`` counts the
    compiled binaries written to disk and ``not_stored`` lists the others with
    the reason, so a warm-up that filled nothing cannot pass for one that did.

    Examples:
        >>> from tropical_gemm.jit import warmup
        >>> result = warmup(semirings="max_plus", dtypes="float32", ops="backward", arch="sm_90")
        >>> result.compiled + result.already_cached, result.not_stored
        (1, ())
    """

    def __init__(self, specs: Iterable[KernelSpec], outcomes: Sequence[tuple[KernelSpec, Target, BuildOutcome]],
                 cache_dir: str | None) -> None:
        super().__init__(specs)
        self.compiled = sum(o.compiled for _, _, o in outcomes)
        self.already_cached = sum(not o.compiled for _, _, o in outcomes)
        self.stored = sum(o.stored for _, _, o in outcomes)
        self.compile_seconds = sum(o.compile_seconds for _, _, o in outcomes if o.compiled)
        self.not_stored = tuple(
            NotStored(spec.name, target.tag, o.store_problem or "the cache did not keep it")
            for spec, target, o in outcomes if o.compiled and not o.stored
        )
        self.cache_dir = cache_dir


def warmup(
    *,
    semirings: Names = None,
    dtypes: Names = None,
    ops: Names = None,
    arch: "ArchLike | Sequence[ArchLike] | None" = None,
    workers: int | None = None,
    progress: Progress | None = None,
    registry: Registry | None = None,
) -> WarmupResult:
    """Compile the selected catalogue kernels into the disk cache; return their specs and what was stored.

    ``arch`` is one architecture (``"sm_90"``), several (a list, or a comma
    separated string), or ``None`` for the current GPU.  Kernels already in
    the cache are read and verified, not recompiled.  The first compile error
    stops the run and is raised (kernels finished by then stay cached).  A
    kernel compiled but not stored (read-only or full disk, cache disabled)
    is listed in ``not_stored`` with the reason; it is not an exception.

    Examples:
        >>> from tropical_gemm.jit import warmup
        >>> specs = warmup(semirings="max_plus", dtypes="float32", ops="backward,backward_ordered_b",
        ...                arch="sm_80,sm_90")
        >>> [spec.name for spec in specs]      # each compiled for both targets, no GPU needed
        ['tg_backward_max_plus_f32', 'tg_backward_ordered_b_max_plus_f32']
    """
    chosen = catalogue(semirings_=comma_list(semirings), dtypes=comma_list(dtypes), ops=comma_list(ops))
    targets = _targets(arch)
    jobs = [(spec, target) for target in targets for spec in chosen]
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    count = workers or min(len(jobs), os.cpu_count() or 1, MAX_DEFAULT_WORKERS)
    # here, not at the top: every first device call imports this package, and only warm-ups need a pool
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    builder = registry or default_registry()
    outcomes: list[tuple[KernelSpec, Target, BuildOutcome]] = []
    with ThreadPoolExecutor(max_workers=max(count, 1), thread_name_prefix="tropical-gemm-warmup") as pool:
        pending = {pool.submit(builder.build, spec, target): (spec, target) for spec, target in jobs}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                spec, target = pending.pop(future)
                if future.exception() is not None:
                    for other in pending:
                        other.cancel()
                    raise future.exception()  # type: ignore[misc]
                outcomes.append((spec, target, future.result()))
                if progress is not None:
                    progress(len(outcomes), len(jobs), spec, target)
    return WarmupResult(chosen, outcomes, builder.stats()["cache_dir"])


def _targets(arch: "ArchLike | Sequence[ArchLike] | None") -> list[Target]:
    """Distinct targets, in the order given; ``None`` asks the current GPU."""
    if arch is None:
        try:
            return [device_target(current_device())]
        except (RuntimeError, ImportError, OSError) as exc:  # CUDA errors are RuntimeErrors; no CuPy: ImportError
            raise NoGpuForArchError(exc) from exc
    if isinstance(arch, str):
        archs: list[ArchLike] = list(comma_list(arch) or [])
    elif isinstance(arch, int) or (isinstance(arch, tuple) and all(isinstance(x, int) for x in arch)):
        archs = [arch]
    else:
        archs = list(arch)
    if not archs:
        raise ValueError("arch is empty; name at least one architecture, e.g. 'sm_90'")
    targets: list[Target] = []
    for a in archs:
        target = resolve_target(a)
        if target not in targets:
            targets.append(target)
    return targets
