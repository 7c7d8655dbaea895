"""``import tropical_gemm`` imports what a first ``matmul`` needs; ``einsum`` loads on first use.

``tropical_gemm.einsum`` is both the subpackage and the function it exports:
whichever is imported first, ``tg.einsum`` must stay the function.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_EINSUM_CALL = ("import numpy as np\n"
                "a = np.arange(6, dtype='float32').reshape(2, 3)\n"
                "got = tg.einsum('ij,jk->ik', a, a.T, semiring='max_plus')\n"
                "want = tg.matmul(a, a.T, 'max_plus')\n"
                "assert (got == want).all(), (got, want)\n")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_import_leaves_einsum_and_the_cpu_engine_unloaded():
    out = _run("import sys, json, tropical_gemm as tg\n"
               "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tropical_gemm.'))))")
    loaded = json.loads(out)
    for module in ("tropical_gemm.einsum", "tropical_gemm.engines.cpu", "tropical_gemm.jit",
                   "tropical_gemm.engines.cuda"):
        assert module not in loaded, loaded
    assert "tropical_gemm.api" in loaded


@pytest.mark.parametrize("first", [
    "",                                              # tg.einsum is the first use
    "import tropical_gemm.einsum.lower\n",           # the subpackage is imported before
    "from tropical_gemm.einsum import einsum_plan\n",
    "import tropical_gemm.einsum\n",
])
def test_einsum_is_the_function_before_and_after_the_subpackage_import(first):
    code = ("import types, tropical_gemm as tg\n" + first + _EINSUM_CALL
            + "import tropical_gemm.einsum.lower, tropical_gemm.einsum.plan\n" + _EINSUM_CALL
            + "assert not isinstance(tg.einsum, types.ModuleType), tg.einsum\n"
            + "from tropical_gemm import einsum\n"
            + "assert einsum is tg.einsum is __import__('sys').modules['tropical_gemm.einsum'].einsum\n"
            + "print('einsum' in dir(tg), callable(tg.einsum))")
    assert _run(code) == "True True"


def test_star_import_exports_einsum():
    assert _run("from tropical_gemm import *\nprint(callable(einsum), callable(matmul))") == "True True"


def test_unknown_attribute_is_an_attribute_error():
    import tropical_gemm as tg

    with pytest.raises(AttributeError, match="no attribute 'not_there'"):
        tg.not_there  # noqa: B018


def test_the_device_imports_leave_logging_unloaded():
    out = _run("import sys, json, tropical_gemm, tropical_gemm.engines.cuda.engine\n"
               "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(out)
    assert "logging" not in loaded  # a warm first call logs its disk hit through jit.log


def test_jit_log_drops_info_until_logging_is_loaded_and_always_shows_warnings():
    done = subprocess.run([sys.executable, "-c",
                           "import sys\nfrom tropical_gemm.jit import log\n"
                           "log.info('quiet %s', 1)\nassert 'logging' not in sys.modules\n"
                           "log.warning('shown %s', 2)\n"
                           "import logging\nlogging.basicConfig(level=logging.INFO, format='%(name)s %(message)s')\n"
                           "log.info('configured %s', 3)\n"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "quiet" not in done.stderr
    assert "shown 2" in done.stderr and "tropical_gemm.jit configured 3" in done.stderr
