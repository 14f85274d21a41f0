"""``python -m ste`` and the ``ste`` console script: see :mod:`ste._tools._cli`."""

from __future__ import annotations

import sys

from ._tools._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
