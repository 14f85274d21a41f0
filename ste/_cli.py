"""The command line: ``python -m ste list | show NAME | plot NAME -o FILE.png | check SPEC`` (also ``ste ...``).

Results go to stdout; errors go to stderr with exit status 2 (bad usage, unknown name: with suggestions), and a
failed ``check`` exits with status 1.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

import numpy as np

__all__ = ["main"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="ste",
        description="Inspect, plot and check ste's registry of straight-through and surrogate gradients.",
    )
    parser.add_argument("--version", action="version", version=f"ste {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("list", help="every registered surrogate with its parameters and defaults")
    show = commands.add_parser("show", help="formula, defaults, peak and reference of one surrogate")
    show.add_argument("name", metavar="NAME", help="a registry name or spec string, e.g. 'atan(alpha=4)'")
    plot = commands.add_parser("plot", help="save a plot of a surrogate's primitive and derivative")
    plot.add_argument("name", metavar="NAME", help="a registry name or spec string")
    plot.add_argument("-o", "--output", required=True, metavar="FILE", help="image file to write (.png, .svg, .pdf)")
    plot.add_argument("--range", nargs=2, type=float, default=(-3.0, 3.0), metavar=("LOW", "HIGH"))
    check = commands.add_parser(
        "check", help="check a surrogate's derivative against the autodiff of its primitive, and its finiteness"
    )
    check.add_argument("spec", metavar="SPEC", help="a registry name or spec string, e.g. 'sigmoid_surrogate(beta=4)'")
    check.add_argument("--range", nargs=2, type=float, default=(-4.0, 4.0), metavar=("LOW", "HIGH"))
    check.add_argument("--points", type=int, default=1001, help="grid points (default 1001)")
    return parser


def _list(out: TextIO) -> int:
    from ._catalog import describe
    from .registry import names

    rows = [("name", "parameters", "primitive", "d(x)")]
    for name in names():
        info = describe(name)
        rows.append((name, info.parameter_text(), "yes" if info.has_primitive else "no", info.formula or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3], file=out)
    return EXIT_OK


def _show(name: str, out: TextIO) -> int:
    from ._catalog import describe

    info = describe(name)
    print(info.spec, file=out)
    fields = [
        ("d(x)", info.formula or "-"),
        ("parameters", info.parameter_text()),
        ("peak", info.peak.describe() if info.peak is not None else "- (needs parameters)"),
        ("primitive", "yes" if info.has_primitive else "no"),
        ("reference", info.reference or "-"),
    ]
    for key, value in fields:
        print(f"  {key + ':':<12}{value}", file=out)
    if info.doc:
        print("", file=out)
        print(textwrap.indent(info.doc, "  "), file=out)
    return EXIT_OK


def _plot(name: str, output: str, x_range: Sequence[float], out: TextIO) -> int:
    from ._plot import plot

    figure = plot(name, (float(x_range[0]), float(x_range[1])))
    figure.savefig(output)
    print(f"wrote {output}", file=out)
    return EXIT_OK


def _check(spec: str, x_range: Sequence[float], points: int, out: TextIO, err: TextIO) -> int:
    from ._gradcheck import check_finite, check_gradient
    from .registry import get

    surrogate = get(spec)
    # A grid shifted off round numbers: kinks (|x| = clip, width/2, ...) have no derivative to compare with.
    grid = np.linspace(x_range[0], x_range[1], points) + 1.234567e-4
    failed = False
    if surrogate.has_primitive:
        try:
            check_gradient(surrogate, grid)
            print(f"ok    {surrogate!r}: derivative = autodiff of the primitive at {points} points (float64)", file=out)
        except AssertionError as error:
            failed = True
            print(f"FAIL  {error}", file=err)
    else:
        print(f"skip  {surrogate!r}: no primitive to compare the derivative with", file=out)
    try:
        check_finite(surrogate)
        print(
            f"ok    {surrogate!r}: finite at 0, ±1e-30, ±1e4 and ±max in float16, bfloat16, float32, float64", file=out
        )
    except AssertionError as error:
        failed = True
        print(f"FAIL  {error}", file=err)
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    from ._errors import STEError

    out, err = sys.stdout, sys.stderr
    try:
        if args.command == "list":
            return _list(out)
        if args.command == "show":
            return _show(args.name, out)
        if args.command == "plot":
            return _plot(args.name, args.output, args.range, out)
        return _check(args.spec, args.range, args.points, out, err)
    except STEError as error:
        print(f"ste {args.command}: error: {error}", file=err)
        return EXIT_USAGE
    except OSError as error:  # e.g. the output file cannot be written
        print(f"ste {args.command}: error: {error}", file=err)
        return EXIT_USAGE
