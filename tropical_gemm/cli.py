"""``tropical-gemm`` / ``python -m tropical_gemm``: info, bench, warm-up, cache maintenance, demo.

Each subcommand is a :class:`Command`: a name, a one-line help, a function
that adds its arguments and a function that runs it and returns the exit
status.  A new subcommand is one more entry in :data:`COMMANDS`.  Only the
chosen command's arguments are built, so ``tropical-gemm cache info`` never
imports the demo or the benchmark (nor CuPy).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from .info import human_size
from .jit.cache.config import comma_list
from .jit import log as jit_log
from .jit.compiler import NvrtcUnavailableError, Target
from .jit.spec import KernelSpec
from .options import arch_list, parse_size, whole_number
from .progress import ProgressBar


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]


class CliError(Exception):
    """A user-facing failure: printed as ``tropical-gemm: error: ...``, exit status 1."""


# ---- warmup ------------------------------------------------------------------------------------


def _add_warmup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", type=arch_list, help="comma-separated architectures, e.g. sm_80,sm_90 "
                                       "(default: the current GPU's); no GPU is needed when given")
    parser.add_argument("--semiring", action="append", help="semiring(s) to compile, e.g. max_plus "
                                                            "(comma-separated or repeated; default: all)")
    parser.add_argument("--dtype", action="append", help="dtype(s), e.g. float32 (default: all)")
    parser.add_argument("--op", action="append", help="operation(s): forward, forward_argmax, argmax_resolve, "
                                                      "argmax_resolve_staged, backward, backward_ordered_a, "
                                                      "backward_ordered_b (default: all)")
    parser.add_argument("--workers", type=whole_number(1, 1024),
                        help="parallel compiles (default: CPU count, at most 16)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (default): CUDA kernels; cpu: the CPU engine's kernels for --semiring and "
                             "--dtype (and_or: bool), with and without argmax (numba's, where the compiled "
                             "extension is not built, and and_or's)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    parser.set_defaults(handler=_run_warmup)


def _run_cpu_warmup(args: argparse.Namespace) -> int:
    from .engines import cpu

    started = time.perf_counter()
    products = [(sr, dtype, argmax) for sr, dtype in _cpu_warmup_pairs(args) for argmax in (False, True)]
    bar = ProgressBar(sys.stderr)
    numba_kernels = 0
    for done, (sr, dtype, argmax) in enumerate(products, 1):
        numba_kernels += cpu.prepare(sr, dtype, argmax)
        bar.update(done, len(products), f"{sr.name} {dtype}{' argmax' if argmax else ''}")
    bar.finish()
    summary = {"products": len(products), "numba_kernels": numba_kernels, "kernels": cpu.kernels_description(),
               "wall_seconds": round(time.perf_counter() - started, 3)}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{len(products)} CPU products ready ({summary['kernels']}; {numba_kernels} numba kernels "
              f"compiled or loaded) in {summary['wall_seconds']:.1f} s")
    return 0


def _cpu_warmup_pairs(args: argparse.Namespace) -> list[tuple[Any, str]]:
    """The (semiring, dtype) pairs ``warmup --device cpu`` prepares: each semiring with the dtypes it takes.

    The ordered semirings take the engine's dtypes, ``and_or`` its truth dtypes
    (bool, uint8); a dtype left out means all of a semiring's, and a semiring
    named with none of its dtypes is an error.
    """
    from .dtypes import BOOLEAN_DTYPES, ENGINE_DTYPES
    from .semirings import get_semiring, semirings

    dtypes = comma_list(args.dtype)
    if unknown := sorted(set(dtypes or ()) - set(ENGINE_DTYPES) - set(BOOLEAN_DTYPES)):
        raise CliError(f"the CPU engine's kernels take {', '.join(ENGINE_DTYPES)} (float16 and bfloat16 use "
                       f"float32's), and {', '.join(BOOLEAN_DTYPES)} for and_or, not {', '.join(unknown)}")
    pairs = []
    for name in comma_list(args.semiring) or semirings():
        sr = get_semiring(name)
        own = BOOLEAN_DTYPES if sr.boolean else ENGINE_DTYPES
        chosen = [d for d in dtypes if d in own] if dtypes else list(own)
        if not chosen and args.semiring:
            raise CliError(f"{sr.name} takes the dtypes {', '.join(own)}, none of --dtype {', '.join(dtypes)}")
        pairs += [(sr, dtype) for dtype in chosen]
    return pairs


def _run_warmup(args: argparse.Namespace) -> int:
    if args.device == "cpu":
        return _run_cpu_warmup(args)
    from .jit import warmup
    from .jit.warmup import NoGpuForArchError

    bar = ProgressBar(sys.stderr, unit="kernel", description="warmup")

    def progress(done: int, total: int, spec: KernelSpec, target: Target) -> None:
        bar.update(done, total, f"{spec.name} ({target.tag})")

    started = time.perf_counter()
    try:
        result = warmup(semirings=comma_list(args.semiring), dtypes=comma_list(args.dtype),
                        ops=comma_list(args.op), arch=args.arch, workers=args.workers, progress=progress)
    except NoGpuForArchError as exc:
        raise CliError(f"no usable CUDA GPU to take the architecture from ({exc.cause}); pass --arch, "
                       "e.g. --arch sm_90 or --arch sm_80,sm_90") from exc
    bar.finish()
    if not result:  # a warm-up that selected nothing must not pass for one that filled the cache
        given = " ".join(f"--{n} {','.join(comma_list(getattr(args, n)))}" for n in ("semiring", "dtype", "op")
                         if getattr(args, n))
        raise CliError(f"no catalogue kernel matches {given} (and_or's kernels have dtype bool; float16 products "
                       "run the float32 kernels, warm them with --dtype float32,float16); leave a filter out")
    summary = {
        "kernels": len(result), "builds": result.compiled + result.already_cached, "compiled": result.compiled,
        "already_cached": result.already_cached, "stored": result.stored,
        "not_stored": [{"name": n.name, "target": n.target, "reason": n.reason} for n in result.not_stored],
        "compile_seconds": round(result.compile_seconds, 3), "wall_seconds": round(time.perf_counter() - started, 3),
        "cache_dir": result.cache_dir,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        where = summary["cache_dir"] or "memory only (disk cache disabled)"
        print(f"{summary['builds']} kernel builds ({result.compiled} compiled, {result.stored} stored, "
              f"{result.already_cached} already cached, {len(result.not_stored)} not stored) in "
              f"{summary['wall_seconds']:.1f} s; cache: {where}")
    if result.not_stored:
        reasons = sorted({n.reason for n in result.not_stored})
        print(f"tropical-gemm: error: {len(result.not_stored)} of {summary['builds']} kernel builds were "
              f"compiled but not stored: {'; '.join(reasons)}", file=sys.stderr)
        return 1
    return 0


# ---- cache -------------------------------------------------------------------------------------


def _add_cache_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    info = actions.add_parser("info", help="where the cache is, how big, which targets",
                              description="Show the cache location, state, size and entries per target.")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(handler=_run_cache_info)
    listing = actions.add_parser("list", help="one line per cached kernel",
                                 description="List cached kernels, most recently used first.")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=_run_cache_list)
    clear = actions.add_parser("clear", help="delete every cached kernel",
                               description="Delete every cache entry (all format versions). Files in the "
                                           "cache directory that are not cache entries are left alone.")
    clear.set_defaults(handler=_run_cache_clear)
    prune = actions.add_parser("prune", help="delete least recently used kernels down to a size",
                               description="Delete least recently used entries until the cache holds at "
                                           "most --max-bytes: GPU entries and numba's CPU kernels together, "
                                           "a CPU kernel with all its compiled variants.")
    prune.add_argument("--max-bytes", required=True, type=parse_size,
                       help="size to keep, in bytes or with a suffix: 500M, 2G")
    prune.add_argument("--json", action="store_true", help="machine-readable output")
    prune.set_defaults(handler=_run_cache_prune)
    export = actions.add_parser("export", help="write cache entries to a bundle (.tar.gz)",
                                description="Write cache entries to a bundle that other machines can import.")
    export.add_argument("file", type=Path, help="bundle to write, e.g. kernels.tar.gz")
    export.add_argument("--arch", type=arch_list, help="only these targets, comma-separated (e.g. sm_90,compute_120)")
    export.set_defaults(handler=_run_cache_export)
    import_ = actions.add_parser("import", help="verify a bundle and add its entries to the cache",
                                 description="Verify every entry of a bundle (checksums, names), then add "
                                             "them all to the cache; a bad bundle imports nothing.")
    import_.add_argument("file", type=Path, help="bundle written by 'cache export'")
    import_.set_defaults(handler=_run_cache_import)


def _cache() -> Any:
    from .jit.cache import default_cache

    return default_cache()


def _run_cache_info(args: argparse.Namespace) -> int:
    from .info import cache_report

    info = {**cache_report(), "nvrtc_version": _nvrtc_version_or_none()}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"cache dir:   {info['cache_dir'] or '(disabled by TROPICAL_GEMM_DISABLE_DISK_CACHE)'}")
    print(f"format:      v{info['format_version']}")
    print(f"entries:     {info['entries']} ({human_size(info['bytes'])})")
    for target, slot in sorted(info["targets"].items()):
        print(f"  {target:<12} {slot['entries']:>5} entries  {human_size(slot['bytes']):>9}")
    print(f"NVRTC:       {info['nvrtc_version'] or 'not available'}")
    return 0


def _nvrtc_version_or_none() -> str | None:
    from .jit.compiler import nvrtc_version

    try:
        major, minor = nvrtc_version()
    except NvrtcUnavailableError:
        return None
    return f"{major}.{minor}"


def _run_cache_list(args: argparse.Namespace) -> int:
    from .engines.cpu import numba_files

    cache = _cache()
    entries = sorted(cache.entries(), key=lambda e: e.last_used, reverse=True)
    cpu = [f for f in numba_files.files(cache.root) if f.is_variant] if cache.root is not None else []
    if args.json:
        print(json.dumps([
            {"name": e.metadata.name, "target": e.metadata.target, "nvrtc_version": e.metadata.nvrtc_version,
             "package_version": e.metadata.package_version, "bytes": e.size, "last_used": e.last_used,
             "created": e.metadata.created, "compile_seconds": e.metadata.compile_seconds,
             "spec": e.metadata.spec, "path": str(e.payload_path)}
            for e in entries
        ] + [{"name": f.path.stem, "target": numba_files.TARGET, "bytes": f.size, "created": f.modified,
              "path": str(f.path)} for f in cpu], indent=2))
        return 0
    for e in entries:
        used = datetime.fromtimestamp(e.last_used).strftime("%Y-%m-%d %H:%M")
        print(f"{e.metadata.name:<48} {e.metadata.target:<12} nvrtc {e.metadata.nvrtc_version:<6} "
              f"{human_size(e.size):>9}  used {used}")
    for f in cpu:
        made = datetime.fromtimestamp(f.modified).strftime("%Y-%m-%d %H:%M")
        print(f"{f.path.stem[:48]:<48} {numba_files.TARGET:<12} {'':<12} {human_size(f.size):>9}  made {made}")
    return 0


def _run_cache_clear(args: argparse.Namespace) -> int:
    cache = _cache()
    if not cache.enabled:
        raise CliError(f"{cache.write_problem}; nothing to clear")
    from .engines.cpu import numba_files

    removed = cache.clear()
    removed_cpu = numba_files.clear(cache.root)
    cpu_note = f" ({removed_cpu} of them numba's CPU kernels)" if removed_cpu else ""
    print(f"removed {removed + removed_cpu} entries from {cache.root}{cpu_note}")
    return 0


def _run_cache_prune(args: argparse.Namespace) -> int:
    """GPU entries and numba's CPU kernels share the budget, least recently used first."""
    cache = _cache()
    if not cache.enabled:
        raise CliError(f"{cache.write_problem}; nothing to prune")
    from .engines.cpu import numba_files

    result = numba_files.prune_with_gpu_entries(cache, args.max_bytes)
    if args.json:
        print(json.dumps({"removed": result.removed, "freed_bytes": result.freed_bytes,
                          "remaining_bytes": result.remaining_bytes}))
    else:
        print(f"removed {result.removed} entries ({human_size(result.freed_bytes)}); "
              f"{human_size(result.remaining_bytes)} remain in {cache.root}")
    return 0


def _run_cache_export(args: argparse.Namespace) -> int:
    from .jit.bundle import export_bundle

    targets = comma_list(args.arch)
    count = export_bundle(_cache(), args.file, targets=targets)
    print(f"exported {count} entries to {args.file}")
    return 0


def _run_cache_import(args: argparse.Namespace) -> int:
    from .jit.bundle import import_bundle

    cache = _cache()
    result = import_bundle(cache, args.file)
    print(f"imported {result.imported} verified entries into {cache.root}")
    return 0


# ---- info and bench ----------------------------------------------------------------------------


def _add_info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=_run_info)


def _run_info(args: argparse.Namespace) -> int:
    from .info import collect, format_report

    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    from .bench import add_bench_arguments

    add_bench_arguments(parser)
    parser.set_defaults(handler=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(args, ProgressBar(sys.stderr, description="bench"))


# ---- demo --------------------------------------------------------------------------------------


def _add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    try:
        from . import demo
    except ImportError as exc:
        problem = f"the demo cannot be loaded: {exc}"

        def unavailable(args: argparse.Namespace) -> int:
            raise CliError(problem)

        parser.set_defaults(handler=unavailable)
        return
    demo.add_demo_arguments(parser)
    parser.set_defaults(handler=demo.run_demo)


# ---- main --------------------------------------------------------------------------------------

COMMANDS: tuple[Command, ...] = (
    Command("info", "versions, GPUs, NVRTC, the kernel cache, and which engines are usable (and why not)",
            _add_info_arguments),
    Command("bench", "a short throughput and start-up benchmark on the GPU, or the CPU without one",
            _add_bench_arguments),
    Command("warmup", "compile kernels into the disk cache ahead of time (no GPU needed with --arch)",
            _add_warmup_arguments),
    Command("cache", "inspect and maintain the kernel cache: info, list, clear, prune, export, import",
            _add_cache_arguments),
    Command("demo", "run a short demonstration", _add_demo_arguments),
)

#: Errors that mean "the request cannot be served": one line, not a traceback (unless --verbose).
EXPECTED_ERRORS = (CliError, RuntimeError, ValueError, OSError)


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser, with arguments only for ``command`` (the others are listed, not built)."""
    parser = argparse.ArgumentParser(
        prog="tropical-gemm",
        description="Tropical matrix products on GPUs and CPUs: diagnostics, benchmark, kernel cache "
                    "tools and demo.",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log compiles and cache hits (logger tropical_gemm.jit) to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        sub = commands.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.name == command:
            cmd.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in arguments if not a.startswith("-")), None)
    parser = build_parser(command if command in {c.name for c in COMMANDS} else None)
    unknown = _unknown_leading_options(arguments)
    if unknown:  # else argparse would only say that COMMAND is missing
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args = parser.parse_args(arguments)
    if args.verbose:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger(jit_log.NAME).setLevel(logging.INFO)
    try:
        status = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not at interpreter exit
        return status
    except BrokenPipeError:
        return _reader_went_away()
    except EXPECTED_ERRORS as exc:
        if args.verbose:
            raise
        print(f"tropical-gemm: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tropical-gemm: interrupted", file=sys.stderr)
        return 130


def _unknown_leading_options(arguments: Sequence[str]) -> list[str]:
    """The options before the command that the top level does not take (``-h``, ``-v``, combined or long)."""
    unknown = []
    for argument in arguments:
        if not argument.startswith("-") or argument == "--":
            break
        long_known = argument in ("--help", "--verbose")
        short_known = argument[1:2] != "-" and set(argument[1:]) <= {"h", "v"}
        if not (long_known or short_known):
            unknown.append(argument)
    return unknown


def _reader_went_away() -> int:
    """``tropical-gemm cache list | head -1``: the reader has what it wanted, so stop quietly.

    stdout is pointed at /dev/null so that the interpreter's final flush does
    not raise (and print "Broken pipe") once more on the way out.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (captured in tests)
        pass
    return 0
