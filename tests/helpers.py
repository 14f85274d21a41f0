"""Small shared helpers for the tests (no assertions of their own, but for the comparison with a Keras parent that
cannot run on this CPU)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)

#: Absolute/relative tolerances per dtype for comparisons against float64 numpy references.
TOLERANCE = {tf.float16: 2e-3, tf.bfloat16: 2e-2, tf.float32: 1e-6, tf.float64: 1e-12}


def value_and_grads(
    op: Callable[..., Any], *inputs: Any, dy: Any = None, **kwargs: Any
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """Eager forward value and gradients of ``sum(dy * op(*inputs))`` with respect to every input."""
    tensors = [tf.convert_to_tensor(x) if not isinstance(x, tf.Variable) else x for x in inputs]
    with tf.GradientTape(persistent=True) as tape:
        for t in tensors:
            tape.watch(t)
        y = op(*tensors, **kwargs)
    grads = tape.gradient(y, tensors, output_gradients=dy)
    return y.numpy(), [None if g is None else g.numpy() for g in grads]


def as_float64(values: Sequence[Any] | np.ndarray | tf.Tensor) -> np.ndarray:
    if isinstance(values, tf.Tensor):
        values = tf.cast(values, tf.float64).numpy()
    return np.asarray(values, dtype=np.float64)


def pyproject() -> dict[str, Any]:
    """pyproject.toml, parsed."""
    import tomllib

    parsed: dict[str, Any] = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    return parsed


def extra_requirements(name: str) -> set[str]:
    """The names of the requirements that pyproject.toml's extra ``name`` installs, following ``ste[other]``."""
    import re

    extras = pyproject()["project"]["optional-dependencies"]
    found: set[str] = set()
    for requirement in extras[name]:
        base = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()  # type: ignore[union-attr]
        if base == "ste":
            for other in re.search(r"\[(.*)\]", requirement).group(1).split(","):  # type: ignore[union-attr]
                found |= extra_requirements(other.strip())
        else:
            found.add(base)
    return found


def load_example(name: str) -> Any:
    """The module examples/<name>.py (examples/ is not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Finished:
    """What a fresh Python process did (:func:`run_python`)."""

    returncode: int
    stdout: str
    stderr: str
    directory: Path  # where it wrote its files

    def numbers(self, pattern: str) -> list[float]:
        """The groups of ``pattern``'s first match in stdout, as numbers (the test fails if nothing matches)."""
        import re

        found = re.search(pattern, self.stdout)
        assert found, f"{pattern!r} not in the output:\n{self.stdout[-3000:]}"
        return [float(group) for group in found.groups()]


def run_python(
    args: Sequence[str | Path],
    directory: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600.0,
    check: bool = True,
) -> Finished:
    """``python ARGS`` in a fresh interpreter, run to its end: in ``cwd`` (default ``directory``, where it writes its
    files), with ``env`` (default this process's). For what a process of the suite cannot show: a user's command
    line, a setting TensorFlow reads once at import. The test fails if the process outlives ``timeout`` (a safety
    net, not a speed check: it is killed), or, with ``check``, if it exits with a non-zero status (its stderr)."""
    import subprocess
    import sys

    import pytest

    command = [sys.executable, *(str(arg) for arg in args)]
    where = directory if cwd is None else cwd
    try:
        done = subprocess.run(
            command,
            env=None if env is None else dict(env),
            cwd=where,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as error:
        out, err = (
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (error.stdout, error.stderr)
        )
        pytest.fail(
            f"{command[1:4]} did not finish within {timeout} s:\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        )
    finished = Finished(done.returncode, done.stdout, done.stderr, directory)
    if check and done.returncode != 0:
        pytest.fail(f"{command[1:4]} exited with {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return finished


_NO_TENSORFLOW = """
import sys


class NoTensorFlow:  # as if TensorFlow were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTensorFlow())
"""


def without_tensorflow(directory: Path) -> dict[str, str]:
    """This process's environment for a fresh interpreter that finds this checkout's ste and no TensorFlow, as if it
    were not installed: a ``sitecustomize.py`` written to ``directory`` refuses every ``tensorflow`` module."""
    import os

    (directory / "sitecustomize.py").write_text(_NO_TENSORFLOW)
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (str(directory), root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def run_example(name: str, directory: Path, *args: str) -> Finished:
    """``python examples/<name>.py ARGS`` as a user runs it: a fresh process, in ``directory``, which must succeed."""
    import os

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "3", "MPLBACKEND": "Agg"}
    return run_python([root / "examples" / f"{name}.py", *args], directory, env=env)


#: TensorFlow's errors for CPU kernels it lacks where oneDNN is off (a CPU without AVX-512, unless
#: TF_ENABLE_ONEDNN_OPTS=1): a phrase of the message -> the kernel (issue 18).
MISSING_CPU_KERNELS = {
    "only supports the NHWC tensor format": "Conv2D in NCHW layout (channels_first)",
    "do not yet support dilation rates larger than 1": "transposed convolution with dilation_rate > 1",
}


def missing_cpu_kernel(error: BaseException) -> str | None:
    """The CPU kernel ``error`` says this TensorFlow lacks (see :data:`MISSING_CPU_KERNELS`), or None."""
    if not isinstance(error, tf.errors.OpError):
        return None
    return next((kernel for phrase, kernel in MISSING_CPU_KERNELS.items() if phrase in str(error)), None)


def missing_kernel_reason(kernel: str, error: BaseException) -> str:
    """The skip reason of a test whose Keras parent cannot run on this CPU."""
    from tensorflow.python.util import _pywrap_util_port

    onednn = "on" if _pywrap_util_port.IsMklEnabled() else "off"
    return (
        f"this TensorFlow has no CPU kernel for {kernel} (oneDNN {onednn}; TF_ENABLE_ONEDNN_OPTS=1 provides it): "
        f"ste's layer and its Keras parent both raise {type(error).__name__}"
    )


def run_or_skip_like_parent(ours: Callable[[], Any], parent: Callable[[], Any]) -> Any:
    """``ours()``; where it fails for want of a CPU kernel this TensorFlow lacks, check that the Keras ``parent()``
    fails with the same error and skip the test, naming the kernel (it runs wherever the kernel exists)."""
    import pytest

    try:
        return ours()
    except tf.errors.OpError as error:
        kernel = missing_cpu_kernel(error)
        if kernel is None:
            raise
        phrase = next(p for p in MISSING_CPU_KERNELS if p in str(error))
        with pytest.raises(type(error), match=phrase):
            parent()  # the Keras parent cannot run here either
        pytest.skip(missing_kernel_reason(kernel, error))


def expect_ste_error(fn: Callable[[], Any], *words: str) -> Any:
    """The ste error ``fn()`` raises, whose message holds every one of ``words``; any other outcome fails the test."""
    import pytest

    import ste

    try:
        fn()
    except ste.STEError as error:
        for word in words:
            assert word in str(error), (word, str(error))
        return error
    except Exception as error:  # a raw traceback is a failure
        pytest.fail(f"raw {type(error).__name__} instead of an ste.STEError: {error}")
    pytest.fail("no error")
