"""Ahead-of-time warm-up and cache bundles, on real NVRTC compiles without a GPU."""

from __future__ import annotations

import errno
import importlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from jit_helpers import cache_files, gpu_free_registry
from tropical_gemm.jit import Registry, UnsupportedArchError, make_spec, warmup
from tropical_gemm.jit import cache as dc
from tropical_gemm.jit.bundle import MANIFEST_NAME, BundleError, export_bundle, import_bundle
from tropical_gemm.jit.cache import DiskCache

pytestmark = pytest.mark.nvrtc

#: Backward kernels compile in a few hundredths of a second: cheap real work.
SELECTION = dict(semirings="max_plus", dtypes="float32", ops="backward,backward_ordered_a")


def fresh_registry() -> Registry:
    return Registry(loader=lambda *args: pytest.fail("warmup must not load kernels"))


def test_warmup_compiles_the_selection_for_several_archs_without_a_gpu(cache_root):
    registry = fresh_registry()
    progress = []
    specs = warmup(**SELECTION, arch=["sm_80", "sm_90"], workers=2, registry=registry,
                   progress=lambda done, total, spec, target: progress.append((done, total, spec.name, target.tag)))
    assert specs == [make_spec(op, "max_plus", "float32") for op in ("backward", "backward_ordered_a")]
    assert registry.stats()["compiled"] == 4
    assert sorted(p.parent.name for p in cache_files(cache_root, ".cubin")) == ["sm_80", "sm_80", "sm_90", "sm_90"]
    assert [p[0] for p in progress] == [1, 2, 3, 4] and {p[1] for p in progress} == {4}
    assert {(p[2], p[3]) for p in progress} == {(s.name, a) for s in specs for a in ("sm_80", "sm_90")}


def test_a_second_warmup_compiles_nothing_and_the_registry_then_hits_disk(cache_root):
    warmup(**SELECTION, arch="sm_90", registry=fresh_registry())
    again = fresh_registry()
    warmup(**SELECTION, arch="sm_90", registry=again)
    assert again.stats()["compiled"] == 0 and again.stats()["disk_hits"] == 2
    from tropical_gemm.jit.source import kernel_source

    consumer = gpu_free_registry(source=kernel_source)
    consumer.get_function(make_spec("backward", "max_plus", "float32"), 0)
    assert consumer.stats()["compiled"] == 0 and consumer.stats()["disk_hits"] == 1


def test_warmup_accepts_comma_separated_archs_and_deduplicates_targets(cache_root):
    registry = fresh_registry()
    warmup(**SELECTION, arch="sm_90, 9.0,sm_90", registry=registry)
    assert registry.stats()["compiled"] == 2


def test_warmup_rejects_bad_input_before_compiling(cache_root):
    with pytest.raises(UnsupportedArchError):
        warmup(**SELECTION, arch="sm_90,hopper", registry=fresh_registry())
    with pytest.raises(ValueError, match="unknown op"):
        warmup(semirings="max_plus", ops="sideways", arch="sm_90", registry=fresh_registry())
    with pytest.raises(ValueError, match="workers"):
        warmup(**SELECTION, arch="sm_90", workers=0, registry=fresh_registry())
    assert not cache_root.exists()


def test_warmup_without_arch_and_without_gpu_says_to_pass_arch(cache_root, monkeypatch):
    def no_gpu():
        raise RuntimeError("cudaErrorNoDevice")

    warmup_module = importlib.import_module("tropical_gemm.jit.warmup")  # the attribute is the function
    monkeypatch.setattr(warmup_module, "current_device", no_gpu)
    with pytest.raises(RuntimeError, match="pass arch explicitly"):
        warmup(**SELECTION, registry=fresh_registry())


# ---- bundles -------------------------------------------------------------------------------------


@pytest.fixture
def bundle(cache_root, tmp_path) -> Path:
    warmup(**SELECTION, arch=["sm_80", "sm_90"], registry=fresh_registry())
    path = tmp_path / "kernels.tar.gz"
    assert export_bundle(DiskCache(cache_root), path) == 4
    return path


def test_a_bundle_round_trips_into_an_empty_cache(bundle, tmp_path):
    node = DiskCache(tmp_path / "node")
    assert import_bundle(node, bundle).imported == 4
    assert sorted(e.metadata.stem for e in node.entries()) == \
        sorted(e.metadata.stem for e in DiskCache(Path(dc.cache_dir())).entries())



def test_an_export_cut_short_leaves_the_bundle_that_was_there(bundle, cache_root, tmp_path, monkeypatch):
    from tropical_gemm.jit import bundle as bundle_module

    before = bundle.read_bytes()
    added = bundle_module._add_member

    def disk_full_at_the_third_member(archive, name, data):
        if len(archive.getmembers()) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        added(archive, name, data)

    monkeypatch.setattr(bundle_module, "_add_member", disk_full_at_the_third_member)
    with pytest.raises(OSError, match="No space left"):
        export_bundle(DiskCache(cache_root), bundle)
    assert bundle.read_bytes() == before
    assert sorted(p.name for p in bundle.parent.iterdir() if p.name.endswith(".tmp")) == []
    assert import_bundle(DiskCache(tmp_path / "node"), bundle).imported == 4

def test_export_can_select_targets(bundle, cache_root, tmp_path):
    path = tmp_path / "sm90.tar.gz"
    assert export_bundle(DiskCache(cache_root), path, targets=["sm_90"]) == 2
    with pytest.raises(BundleError, match="no cache entries"):
        export_bundle(DiskCache(cache_root), tmp_path / "none.tar.gz", targets=["sm_75"])


def _rewrite(bundle: Path, out: Path, change) -> Path:
    """Copy ``bundle`` to ``out`` with ``change(name, data) -> list[(name, data)]`` applied to each member."""
    with tarfile.open(bundle) as source, tarfile.open(out, "w:gz") as target:
        for member in source:
            data = source.extractfile(member).read()
            for name, new in change(member.name, data):
                info = tarfile.TarInfo(name)
                info.size = len(new)
                target.addfile(info, io.BytesIO(new))
    return out


def _flip_a_bit_in_a_cubin(name, data):
    if name.endswith(".cubin") and "sm_90" in name:
        data = bytearray(data)
        data[100] ^= 1
        data = bytes(data)
    return [(name, data)]


def _add_traversal(name, data):
    extra = [("../../evil.cubin", b"x")] if name == MANIFEST_NAME else []
    return [(name, data)] + extra


def _drop_a_cubin(name, data):
    return [] if name.endswith(".cubin") and "sm_80" in name else [(name, data)]


def _tamper_manifest(name, data):
    if name == MANIFEST_NAME:
        manifest = json.loads(data)
        manifest["entries"][0]["sha256"] = "0" * 64
        data = json.dumps(manifest).encode()
    return [(name, data)]


@pytest.mark.parametrize("change, message", [
    (_flip_a_bit_in_a_cubin, "sm_90.*does not match the manifest's SHA-256"),
    (_add_traversal, "'../../evil.cubin' is not listed in the manifest"),
    (_drop_a_cubin, "sm_80.*which the bundle lacks"),
    (_tamper_manifest, "manifest's SHA-256"),
], ids=["bit-flip", "path-traversal", "missing-binary", "manifest-checksum"])
def test_a_bad_bundle_is_rejected_whole(bundle, tmp_path, change, message):
    bad = _rewrite(bundle, tmp_path / "bad.tar.gz", change)
    node_root = tmp_path / "node"
    with pytest.raises(BundleError, match=message):
        import_bundle(DiskCache(node_root), bad)
    assert not node_root.exists() or not any(p.is_file() for p in node_root.rglob("*"))


def test_a_file_that_is_not_a_bundle_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"definitely not a tarball")
    with pytest.raises(BundleError, match="not a readable bundle"):
        import_bundle(DiskCache(tmp_path / "node"), junk)


def test_module_level_compile_spec_cache_dir_and_prune(cache_root):
    from tropical_gemm.jit import cache_dir, compile_spec, prune

    spec = make_spec("backward", "max_plus", "float32")
    first, second = compile_spec(spec, "sm_90"), compile_spec(spec, (9, 0))
    assert first.compiled and first.stored and first.path.parent == cache_root / f"v{dc.FORMAT_VERSION}" / "sm_90"
    assert not second.compiled and second.binary == first.binary
    assert cache_dir() == cache_root
    assert prune(0).removed == 1 and cache_files(cache_root, ".cubin") == []
