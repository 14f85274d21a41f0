"""``python -m ste`` and the ``ste`` console script: see :mod:`ste._tools._cli`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._tools import _cli

__all__ = ["main"]


def _finish_import() -> None:
    import ste

    ste._load()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv``: default ``sys.argv[1:]``); returns the exit status. ``list`` and ``show`` of a
    built-in name answer from the catalog; every other command first finishes ``import ste``."""
    return _cli.main(argv, load=_finish_import)


if __name__ == "__main__":
    sys.exit(main())
