"""The command line: ``python -m ste [--import MODULE] list | show NAME | plot NAME -o FILE.png | check SPEC``.

Results go to stdout; errors go to stderr as one line with exit status 2 (bad usage, unknown name: with
suggestions), a failed ``check`` exits with status 1, and a ``check`` of what cannot be checked (a quantizer that
reads variables: ``lsq``, ``pact``) says why in one line and exits with status 3. Every command takes quantizer
names (``sign``) as well as surrogates; a name that is both (``approx_sign``) means the surrogate. ``--import
MODULE`` (repeatable) imports the user's modules first, so that the rules they register are listed, shown, plotted
and checked.

``python -m ste`` imports the package without its families (see :mod:`ste`), so ``--help``, ``--version``, usage
errors, ``list`` and ``show NAME`` for a built-in entry answer without importing TensorFlow, installed or not:
:func:`main` prints ``list`` and ``show`` of built-in names from the catalog ``ste/_tools/cli_catalog.json``
(package data: what these commands print with the registry loaded, written by :func:`write_catalog` and compared
with the live registry by a test). Any other command imports TensorFlow and finishes ``import ste`` first (or, without
TensorFlow, says what to install). TensorFlow's device discovery runs with its native log
lines hidden. This module imports nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import io
import json
import math
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO

__all__ = ["main", "render_catalog", "write_catalog"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_CANNOT_CHECK = 3

#: What ``list`` and ``show NAME`` print for the built-in registry (package data written by :func:`write_catalog`).
CATALOG = Path(__file__).with_name("cli_catalog.json")

#: File types ``plot -o`` writes: matplotlib's standard savefig formats (tested against matplotlib's own list).
IMAGE_TYPES = ("png", "svg", "svgz", "pdf", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp", "pgf")


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (no usage block): ``ste plot: error: ... (see: ste plot --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


#: The most grid points ``plot`` and ``check`` take: ``check`` at 10⁶ points takes seconds and under 1 GB; 10⁷ takes
#: several GB (float64 values and their gradients in four dtypes), and 3·10⁹ would never finish.
MAX_POINTS = 1_000_000


def _points(text: str) -> int:
    expected = f"expected an integer from 2 to {MAX_POINTS}"
    try:
        value = int(text)
    except ValueError:  # also a number too long to read (Python's limit on digits)
        raise argparse.ArgumentTypeError(f"{expected}; received {text!r}") from None
    if not 2 <= value <= MAX_POINTS:
        raise argparse.ArgumentTypeError(f"{expected}; received {value}")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two finite numbers LOW HIGH; received {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected two finite numbers LOW HIGH; received {text!r}")
    return value


def _image_path(text: str) -> str:
    suffix = Path(text).suffix.lower().lstrip(".")
    if suffix not in IMAGE_TYPES:
        raise argparse.ArgumentTypeError(
            f"unknown image type {('.' + suffix) if suffix else '(no extension)'} in {text!r}; "
            f"use one of {', '.join('.' + t for t in IMAGE_TYPES)}"
        )
    parent = Path(text).parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"the directory {str(parent)!r} of {text!r} does not exist")
    return text


def _parser() -> _Parser:
    from .._version import __version__

    parser = _Parser(
        prog="ste",
        description="Inspect, plot and check ste's registry of straight-through and surrogate gradients.",
        epilog="Rules registered in your own code: python -m ste --import mypackage.rules show my_rule",
    )
    parser.add_argument("--version", action="version", version=f"ste {__version__}")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (a dotted module name, or a path to a .py file) first, e.g. the module that registers "
        "your own rules; repeatable",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub_import = _Parser(add_help=False)  # after the command too: python -m ste show NAME --import M
    sub_import.add_argument("--import", dest="sub_imports", action="append", default=[], metavar="MODULE")
    commands.add_parser(
        "list", parents=[sub_import], help="every registered surrogate and quantizer with its parameters and defaults"
    )
    show = commands.add_parser("show", parents=[sub_import], help="formula, defaults, peak and reference")
    show.add_argument(
        "name", metavar="NAME", help="a registry name or spec string, e.g. 'atan(alpha=4)', or a quantizer name"
    )
    plot = commands.add_parser(
        "plot", parents=[sub_import], help="save a plot of a surrogate's primitive and derivative (or a quantizer)"
    )
    plot.add_argument("name", metavar="NAME", help="a registry name or spec string, or a quantizer name")
    plot.add_argument(
        "-o", "--output", required=True, type=_image_path, metavar="FILE", help="image file to write (.png, .svg, .pdf)"
    )
    plot.add_argument(
        "--range",
        nargs=2,
        type=_finite,
        default=None,
        metavar=("LOW", "HIGH"),
        help="x range (default: chosen from the derivative's width)",
    )
    plot.add_argument("--points", type=_points, default=601, help=f"grid points, 2 to {MAX_POINTS} (default 601)")
    check = commands.add_parser(
        "check",
        parents=[sub_import],
        help="check a surrogate's derivative against the autodiff of its primitive, and its finiteness",
    )
    check.add_argument(
        "spec", metavar="SPEC", help="a registry name or spec string, e.g. 'sigmoid_surrogate(beta=4)', or a quantizer"
    )
    check.add_argument("--range", nargs=2, type=_finite, default=(-4.0, 4.0), metavar=("LOW", "HIGH"))
    check.add_argument("--points", type=_points, default=1001, help=f"grid points, 2 to {MAX_POINTS} (default 1001)")
    return parser


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(list(argv))
    x_range = getattr(args, "range", None)
    if x_range is not None and not x_range[0] < x_range[1]:
        parser.exit(
            EXIT_USAGE,
            f"ste {args.command}: error: --range needs LOW < HIGH; received {x_range[0]:g} {x_range[1]:g} "
            f"(see: ste {args.command} --help)\n",
        )
    if x_range is not None and not math.isfinite(x_range[1] - x_range[0]):  # the grid's step would be infinite
        parser.exit(
            EXIT_USAGE,
            f"ste {args.command}: error: --range needs a finite width HIGH - LOW; received {x_range[0]:g} "
            f"{x_range[1]:g}, {x_range[1] - x_range[0]:g} apart (see: ste {args.command} --help)\n",
        )
    args.imports = [*args.imports, *getattr(args, "sub_imports", [])]
    return args


@contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null (TensorFlow's C++ log lines bypass Python's logging)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _require_tensorflow(command: str) -> None:
    """TensorFlow and Keras (loaded by ``import ste``) with their devices found, or a one-line error with the fix."""
    from .._keras._requirements import check_requirements
    from ..errors import MissingDependencyError

    try:
        check_requirements()  # TensorFlow and Keras, or which is missing and the pip command
        import tensorflow as tf

        with _native_stderr_silenced():
            tf.config.list_physical_devices()  # device discovery logs natively (e.g. a failed cuInit)
    except MissingDependencyError as error:
        print(f"ste {command}: error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _static_answer(args: argparse.Namespace) -> str | None:
    """What ``list`` or ``show NAME`` prints for the built-in registry, from the catalog; None where the live registry
    is needed (``--import``, a spec string with arguments, a name that is not built in, other commands) or already
    loaded in this process (it may hold entries registered since)."""
    if args.imports or args.command not in ("list", "show") or "ste.registry" in sys.modules:
        return None
    catalog: dict[str, Any] = json.loads(CATALOG.read_text(encoding="utf-8"))
    answer = catalog["list"] if args.command == "list" else catalog["show"].get(args.name)
    return None if answer is None else str(answer)


def _render(command: str, name: str = "") -> str:
    buffer = io.StringIO()
    status = _list(buffer) if command == "list" else _show(name, buffer)
    assert status == EXIT_OK, (command, name)
    return buffer.getvalue()


def _class_path(cls: type) -> str:
    """A quantizer class's public path: ``ste.quantizers.Sign``, or its module's (``ste.larq.quantizers.SteSign``)."""
    module = cls.__module__
    return f"ste.quantizers.{cls.__name__}" if module.startswith("ste.quantizers.") else f"{module}.{cls.__qualname__}"


def render_catalog() -> tuple[str, dict[str, str]]:
    """What ``list`` prints and what ``show NAME`` prints for every built-in surrogate and quantizer name, from the
    live registry (imports TensorFlow): the content of ``ste/_tools/cli_catalog.json``."""
    from ..quantizers import names as quantizer_names
    from ..registry import names

    return _render("list"), {name: _render("show", name) for name in sorted({*names(), *quantizer_names()})}


def write_catalog(path: str | Path | None = None) -> None:
    """Write ``ste/_tools/cli_catalog.json`` from the live registry:
    ``python -c "from ste._tools._cli import write_catalog; write_catalog()"``. Run it after changing a built-in
    entry (a test says when)."""
    listing, shows = render_catalog()
    text = json.dumps({"list": listing, "show": shows}, indent=1, ensure_ascii=False, sort_keys=True)
    (Path(path) if path is not None else CATALOG).write_text(text + "\n", encoding="utf-8")


def _import_user_modules(modules: Sequence[str]) -> None:
    """Import each ``--import`` argument: a dotted module name (found from the current directory too) or a file."""
    from ..errors import CallError

    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            if module.endswith(".py"):
                path = Path(module).resolve()
                if not path.is_file():
                    raise FileNotFoundError(f"no file {module!r}")
                if getattr(sys.modules.get(path.stem), "__file__", None) == str(path):
                    continue  # imported already: a module runs once, as with `import`
                spec = importlib.util.spec_from_file_location(path.stem, path)
                assert spec is not None and spec.loader is not None
                loaded = importlib.util.module_from_spec(spec)
                sys.modules[path.stem] = loaded
                spec.loader.exec_module(loaded)
            else:
                importlib.import_module(module)
        except Exception as error:  # the user's module: any failure is reported in one line
            raise CallError(f"--import {module}: {type(error).__name__}: {error}") from None


def _table(rows: Sequence[tuple[str, ...]], out: TextIO) -> None:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1], file=out)


def _plain(doc: str) -> str:
    """A docstring for the terminal: reStructuredText's ``code`` becomes Markdown's `code`."""
    return doc.replace("``", "`")


def _list(out: TextIO) -> int:
    from ..quantizers import names as quantizer_names
    from ..registry import names
    from ._catalog import describe
    from ._targets import as_quantizer, quantizer_surrogate

    rows = [("name", "parameters", "primitive", "d(x)")]
    for name in names():
        info = describe(name)
        rows.append((name, info.parameter_text(), "yes" if info.has_primitive else "no", info.formula or "-"))
    _table(rows, out)
    quantizers = [("quantizer", "class", "surrogate (backward)")]
    for name in quantizer_names():
        quantizer = as_quantizer(name)
        if quantizer is not None:  # None: the name is a surrogate's too (approx_sign), listed above
            surrogate = quantizer_surrogate(quantizer)
            backward = repr(surrogate) if surrogate is not None else "its own gradient (show NAME)"
            quantizers.append((name, _class_path(type(quantizer)), backward))
    print("", file=out)
    _table(quantizers, out)
    return EXIT_OK


def _fields(fields: Sequence[tuple[str, str]], out: TextIO) -> None:
    for key, value in fields:
        print(f"  {key + ':':<12}{value}", file=out)


def _show(name: str, out: TextIO) -> int:
    from ._catalog import describe
    from ._targets import as_quantizer, quantizer_surrogate

    quantizer = as_quantizer(name)
    surrogate = quantizer_surrogate(quantizer) if quantizer is not None else None
    info = describe(surrogate if surrogate is not None else name) if quantizer is None or surrogate else None
    doc = inspect.cleandoc(type(quantizer).__doc__ or "") if quantizer is not None else info.doc if info else ""
    if quantizer is not None:
        print(repr(quantizer), file=out)
        backward = repr(surrogate) if surrogate is not None else "- (its own gradient, below)"
        _fields([("quantizer", _class_path(type(quantizer))), ("surrogate", backward)], out)
    else:
        assert info is not None
        print(info.spec, file=out)
    if info is not None:
        _fields(
            [
                ("d(x)", info.formula or "-"),
                ("parameters", info.parameter_text()),
                ("peak", info.peak.describe() if info.peak is not None else "- (needs parameters)"),
                ("primitive", "yes" if info.has_primitive else "no"),
                ("reference", info.reference or "-"),
            ],
            out,
        )
    if doc:
        print("", file=out)
        print(textwrap.indent(_plain(doc), "  "), file=out)
    return EXIT_OK


def _plot(name: str, output: str, x_range: Sequence[float] | None, points: int, out: TextIO) -> int:
    from ._plot import plot

    x = None if x_range is None else (float(x_range[0]), float(x_range[1]))
    figure = plot(name, x, points=points)
    figure.savefig(output)
    print(f"wrote {output}", file=out)
    return EXIT_OK


def _check(spec: str, x_range: Sequence[float], points: int, out: TextIO, err: TextIO) -> int:
    import numpy as np
    import tensorflow as tf

    from ..registry import get
    from ._gradcheck import check_finite, check_gradient
    from ._targets import as_quantizer, quantizer_variables

    quantizer = as_quantizer(spec)
    variables = quantizer_variables(quantizer, tf.zeros([1])) if quantizer is not None else []
    if variables:
        print(
            f"ste check: cannot check {quantizer!r}: it reads variables ({', '.join(variables)}), so its gradient "
            f"has more inputs than x; check it in Python with ste.testing.check_gradient on an op that takes them "
            f"as inputs (docs/tools.md)",
            file=err,
        )
        return EXIT_CANNOT_CHECK
    target = quantizer if quantizer is not None else get(spec)
    what = (
        "gradient = derivative of its reference" if quantizer is not None else "derivative = autodiff of the primitive"
    )
    # A grid shifted off round numbers: kinks (|x| = clip, width/2, ...) have no derivative to compare with.
    grid = np.linspace(x_range[0], x_range[1], points) + 1.234567e-4
    failed = False
    checkable = quantizer.gradient_reference(grid) is not None if quantizer is not None else target.has_primitive
    if checkable:
        try:
            check_gradient(target, grid)
            print(f"ok    {target!r}: {what} at {points} points (float64)", file=out)
        except AssertionError as error:
            failed = True
            print(f"FAIL  {error}", file=err)
    else:
        print(f"skip  {target!r}: no primitive to compare the derivative with", file=out)
    try:
        check_finite(target)
        print(f"ok    {target!r}: finite at 0, ±1e-30, ±1e4 and ±max in float16, bfloat16, float32, float64", file=out)
    except AssertionError as error:
        failed = True
        print(f"FAIL  {error}", file=err)
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _message(error: Exception, imports: Sequence[str]) -> str:
    """The error as one line; an unknown name also says how to load the user's module that registers it."""
    from ..errors import UnknownQuantizerError, UnknownSurrogateError

    text = " ".join(str(error).split())
    if isinstance(error, (UnknownSurrogateError, UnknownQuantizerError)):
        loaded = f" (imported so far: {', '.join(imports)})" if imports else ""
        text += f" On the command line, import the module that registers it{loaded}: python -m ste --import MODULE ..."
    return text


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _import_user_modules(args.imports)
    if args.command == "list":
        return _list(out)
    if args.command == "show":
        return _show(args.name, out)
    if args.command == "plot":
        return _plot(args.name, args.output, args.range, args.points, out)
    return _check(args.spec, args.range, args.points, out, err)


def main(argv: Sequence[str] | None = None, load: Callable[[], None] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status. ``load`` finishes
    ``import ste`` where ``python -m ste`` deferred it, before a command that needs the live registry."""
    try:
        args = _parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as done:  # argparse: --help, --version (0) or a usage error (2), already printed
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    static = _static_answer(args)
    if static is not None:
        sys.stdout.write(static)
        return EXIT_OK
    _require_tensorflow(args.command)
    if load is not None:
        load()
    from ..errors import STEError

    out, err = sys.stdout, sys.stderr
    try:
        return _run(args, out, err)
    except (STEError, OSError) as error:  # OSError: e.g. the output file cannot be written
        print(f"ste {args.command}: error: {_message(error, args.imports)}", file=err)
        return EXIT_USAGE
