"""``tropical-gemm info``: what this installation can do, and why not where it cannot.

Each probe catches its own failure and turns it into a sentence that names
the fix, because ``info`` is what a user runs when something is broken: it
must report the broken part, not crash on it.  Nothing here compiles a
kernel, creates the cache directory or writes anything.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from ._version import __version__

#: The libraries whose versions matter in a bug report, by import name.
PACKAGES = ("numpy", "numba", "cupy", "torch")

CUDA_EXTRA_HINT = "pip install 'tropical-gemm-jit[cuda]'"


def package_versions() -> dict[str, dict[str, str] | None]:
    """``{"cupy": {"version": "14.2.0", "distribution": "cupy-cuda13x"}, "torch": None, ...}``.

    Read from package metadata, without importing anything: importing torch
    takes seconds, and a broken cupy must not hide its own version.  cupy
    ships under per-CUDA names, so the distribution is found from the import
    name; more than one (say cupy-cuda12x beside cupy-cuda13x) is listed as is.
    """
    providers = metadata.packages_distributions()
    found: dict[str, dict[str, str] | None] = {}
    for module in PACKAGES:
        dists = sorted(set(providers.get(module, [])))
        found[module] = ({"version": ", ".join(metadata.version(d) for d in dists), "distribution": ", ".join(dists)}
                         if dists else None)
    return found


def nvrtc_report() -> dict[str, Any]:
    """NVRTC's version and the architectures it can build, or why it cannot be loaded."""
    from .jit.compiler import NvrtcUnavailableError, nvrtc_version, supported_archs

    try:
        major, minor = nvrtc_version()
        archs = supported_archs()
    except NvrtcUnavailableError as exc:
        return {"version": None, "archs": [], "problem": str(exc)}
    return {"version": f"{major}.{minor}", "archs": [f"sm_{a}" for a in archs], "problem": None}


def cuda_report(nvrtc_usable: bool) -> dict[str, Any]:
    """The CUDA driver and every GPU CuPy sees (name, arch, memory, the binary kernels get), or why none."""
    report: dict[str, Any] = {"driver": None, "gpus": [], "problem": None,
                              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        import cupy
    except Exception as exc:  # not installed, or installed with CUDA libraries that fail to load
        report["problem"] = _cupy_import_problem(exc)
        return report
    runtime = cupy.cuda.runtime
    try:
        report["driver"] = _cuda_version(runtime.driverGetVersion())
        count = runtime.getDeviceCount()
    except Exception as exc:
        report["problem"] = f"CUDA finds no usable GPU ({exc}){_driver_hint(report['driver'])}"
        return report
    if count == 0:
        report["problem"] = "CUDA finds no GPU (0 devices); check nvidia-smi and CUDA_VISIBLE_DEVICES"
        return report
    report["gpus"] = [_gpu(runtime, device, nvrtc_usable) for device in range(count)]
    return report


def _cupy_import_problem(exc: Exception) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name == "cupy":
        return f"cupy is not installed: {CUDA_EXTRA_HINT}"
    return f"cupy cannot be imported ({type(exc).__name__}: {exc}); reinstall it: {CUDA_EXTRA_HINT}"


def _cuda_version(encoded: int) -> str | None:
    """``13000`` -> ``"13.0"``; 0 means no driver is installed."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}" if encoded else None


def _driver_hint(driver: str | None) -> str:
    return "; the NVIDIA driver is missing: install it, and nvidia-smi should then list the GPU" if driver is None else ""


def _gpu(runtime: Any, device: int, nvrtc_usable: bool) -> dict[str, Any]:
    props = runtime.getDeviceProperties(device)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    arch = f"sm_{props['major']}{props['minor']}"
    return {"id": device, "name": name, "arch": arch, "memory_bytes": int(props["totalGlobalMem"]),
            "kernels": _kernel_target(arch) if nvrtc_usable else "cached kernels only (no NVRTC)"}


def _kernel_target(arch: str) -> str:
    """What this NVRTC builds for a GPU: its own cubin, or PTX the driver compiles at load."""
    from .jit.compiler import UnsupportedArchError, resolve_target

    try:
        target = resolve_target(arch)
    except UnsupportedArchError as exc:
        return f"none: {exc}"
    return f"cubin {target.tag}" if target.kind == "cubin" else f"PTX {target.tag} (the driver compiles it at load)"


def cache_report() -> dict[str, Any]:
    """Where the kernel cache is, whether it can be written, and its entries per target (arch)."""
    from .jit.cache import ENV_CACHE_DIR, FORMAT_VERSION, default_cache

    from .engines.cpu import numba_files

    cache = default_cache()
    entries = cache.entries()
    targets: dict[str, dict[str, int]] = {}
    for entry in entries:
        slot = targets.setdefault(entry.metadata.target, {"entries": 0, "bytes": 0})
        slot["entries"] += 1
        slot["bytes"] += entry.size
    root = cache.root
    numba = numba_files.summary(root) if root is not None else {"entries": 0, "bytes": 0}
    if numba["bytes"]:
        targets[numba_files.TARGET] = numba
    return {
        "cache_dir": str(root) if root is not None else None,
        "configured_by": ENV_CACHE_DIR if os.environ.get(ENV_CACHE_DIR) else "platform default",
        "enabled": root is not None,
        "exists": bool(root and root.is_dir()),
        "writable": root is not None and _can_create_in(root),
        "format_version": FORMAT_VERSION,
        "entries": len(entries) + numba["entries"],
        "bytes": sum(e.size for e in entries) + numba["bytes"],
        "targets": targets,
    }


def _can_create_in(root: Path) -> bool:
    """Whether files can be created under ``root``, or, if it does not exist yet, where it would be made."""
    path = root
    while not path.exists():
        if path.parent == path:
            return False
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def cpu_engine_report() -> dict[str, Any]:
    """The CPU engine: which kernels serve it (compiled ahead of time, or numba's) on its worker threads.

    numba's version comes from package metadata: importing numba to ask it
    would cost a large part of a second.
    """
    from .engines.cpu import kernels_description, num_threads

    try:
        kernels = kernels_description()
    except metadata.PackageNotFoundError:
        return {"usable": False, "detail": "the compiled kernels are not built and numba is not installed: "
                                           "pip install 'numba>=0.60'"}
    return {"usable": True, "detail": f"{kernels} on {num_threads()} threads"}


def engine_report(cuda: dict[str, Any], nvrtc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Which engines can run, with what, or why not."""
    engines: dict[str, dict[str, Any]] = {"cpu": cpu_engine_report()}
    if not cuda["gpus"]:
        engines["cuda"] = {"usable": False, "detail": cuda["problem"]}
    elif nvrtc["problem"] is not None:
        engines["cuda"] = {"usable": True, "detail": f"{len(cuda['gpus'])} GPU(s), but only kernels already in the "
                                                     f"cache can run: {nvrtc['problem']}"}
    else:
        engines["cuda"] = {"usable": True, "detail": f"{len(cuda['gpus'])} GPU(s), NVRTC {nvrtc['version']}"}
    return engines


def collect() -> dict[str, Any]:
    """The whole report, as ``tropical-gemm info --json`` prints it."""
    nvrtc = nvrtc_report()
    cuda = cuda_report(nvrtc["problem"] is None)
    try:
        cache: dict[str, Any] = cache_report()
    except ValueError as exc:  # a malformed TROPICAL_GEMM_CACHE_* variable
        cache = {"problem": str(exc)}
    return {
        "tropical_gemm": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "packages": package_versions(),
        "nvrtc": nvrtc,
        "cuda": cuda,
        "cache": cache,
        "engines": engine_report(cuda, nvrtc),
        "semirings": semiring_report(),
    }


def semiring_report() -> dict[str, list[str]]:
    """The semirings every engine serves by name: those on arrays, and the counting ones on (values, counts) pairs."""
    from .semirings import counting_semirings, semirings

    return {"arrays": list(semirings()), "counting": list(counting_semirings())}


def human_size(size: int) -> str:
    """``1536`` -> ``"1.5 KiB"``: sizes as people read them."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_report(report: dict[str, Any]) -> str:
    """The report as aligned text for a terminal."""
    lines = [f"tropical_gemm {report['tropical_gemm']} (Python {report['python']}, {report['platform']})", "",
             "packages"]
    for module, found in report["packages"].items():
        if found is None:
            lines.append(f"  {module:<8} not installed")
        else:
            dist = f" ({found['distribution']})" if found["distribution"] != module else ""
            lines.append(f"  {module:<8} {found['version']}{dist}")
    nvrtc = report["nvrtc"]
    lines.append("NVRTC      " + (f"{nvrtc['version']} (builds {nvrtc['archs'][0]} to {nvrtc['archs'][-1]})"
                                  if nvrtc["problem"] is None else f"unavailable: {nvrtc['problem']}"))
    lines += _cuda_lines(report["cuda"]) + _cache_lines(report["cache"]) + ["engines"]
    for name, engine in report["engines"].items():
        lines.append(f"  {name:<5} {'usable' if engine['usable'] else 'not usable':<11} {engine['detail']}")
    lines += ["semirings  " + ", ".join(report["semirings"]["arrays"]),
              "  counting (values, counts) pairs: " + ", ".join(report["semirings"]["counting"])]
    return "\n".join(lines)


def _cuda_lines(cuda: dict[str, Any]) -> list[str]:
    visible = cuda["cuda_visible_devices"]
    lines = [f"CUDA       driver {cuda['driver'] or 'not found'}"
             + (f", CUDA_VISIBLE_DEVICES={visible}" if visible is not None else "")]
    if not cuda["gpus"]:
        return lines + ["GPUs       none (see engines below)"]
    lines.append("GPUs")
    for gpu in cuda["gpus"]:
        lines.append(f"  {gpu['id']}  {gpu['name']}  {gpu['arch']}  {human_size(gpu['memory_bytes'])}  "
                     f"kernels: {gpu['kernels']}")
    return lines


def _cache_lines(cache: dict[str, Any]) -> list[str]:
    if "problem" in cache:
        return [f"cache      unusable: {cache['problem']}"]
    if not cache["enabled"]:
        return ["cache      disabled by TROPICAL_GEMM_DISABLE_DISK_CACHE: every process compiles what it uses"]
    state = "writable" if cache["writable"] else (
        "NOT writable: kernels compiled here stay in memory; set TROPICAL_GEMM_CACHE_DIR to a writable directory")
    lines = [f"cache      {cache['cache_dir']} ({cache['configured_by']})",
             f"  {cache['entries']} entries, {human_size(cache['bytes'])}, {state}"]
    for target, slot in sorted(cache["targets"].items()):
        lines.append(f"  {target:<12} {slot['entries']:>5} entries  {human_size(slot['bytes']):>9}")
    return lines
