"""Exploratory: the stream kernel under forced schedules, against the square kernel (not a shipped benchmark)."""
import sys
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
from ceilings import time_gpu
import tropical_gemm as tg
from tropical_gemm.engines.cuda import plan as planning, prepared
from tropical_gemm.engines.cuda import gpu
SHIPPED = planning.stream_work

def forced(dp_share):
    def stream_work(tiles, k, sms, shape, itemsize, argmax, tiled):
        slots = sms * shape.min_blocks
        dp = tiles if dp_share == "all" else (0 if dp_share == "none" else max(0, tiles // slots - 1) * slots)
        counter = max(tiles - dp, 1) * 4
        parts = 2 * slots * shape.bm * shape.bn
        vo = planning.aligned(counter); io = planning.aligned(vo + parts * itemsize)
        return planning.StreamWork(slots, dp, counter, vo, io, io + (parts * 4 if argmax else 0))
    return stream_work

def use(f):
    planning.stream_work = f
    planning.plan_forward.cache_clear(); prepared.prepare_product.cache_clear()

rng = np.random.default_rng(0)
for (m, k, n) in [(4096, 4096, 4096), (2048, 2048, 2048), (3000, 1000, 2047), (1000, 3000, 777), (1024, 4096, 1024)]:
    a = cp.asarray(rng.integers(-99, 99, (m, k)).astype(np.float32)); b = cp.asarray(rng.integers(-99, 99, (k, n)).astype(np.float32))
    out = cp.empty((m, n), np.float32)
    row = []
    for name, f in (("square", lambda *x, **y: None), ("stream-as-dp", forced("all")), ("stream-all-sk", forced("none")), ("shipped", SHIPPED)):
        use(f)
        t = time_gpu(lambda: tg.matmul(a, b, out=out), reps=10, graph=True)
        row.append(f"{name} {t*1e6:.1f}")
    use(SHIPPED)
    print(f"{m}x{k}x{n}: " + ", ".join(row), flush=True)
