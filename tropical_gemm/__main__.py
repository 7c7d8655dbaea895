"""``python -m tropical_gemm``: the same command line as ``tropical-gemm`` (see :mod:`tropical_gemm.cli`)."""

import sys

from .cli import main

sys.exit(main())
