"""The package version, in a module that imports nothing.

Every layer may read it (the kernel cache keys on it, ``info`` and ``bench``
report it) without importing the package's public API, so no import runs back
up the layers.  ``pyproject.toml`` reads the version from here, so the
installed distribution's metadata cannot disagree with it.
"""

__version__ = "0.1.0"
"""The version of the ``tropical-gemm-jit`` distribution.

It is part of every kernel's cache key, so an upgrade never loads a kernel
built from older sources.

Examples:
    >>> import tropical_gemm as tg
    >>> from importlib.metadata import version
    >>> tg.__version__ == version("tropical-gemm-jit")   # the installed metadata reads it from here
    True
"""
