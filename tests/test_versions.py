"""Every TensorFlow and Keras release ste declares.

* What differs between Keras 3.12 and 3.15, read the same way on each: a transposed convolution's ``output_padding``
  (Keras before 3.15 leaves it out of the config; a reloaded layer had another output length, checked against the
  transposed convolution's length formula) and batch renormalization (no ``renorm`` attribute before Keras 3.14).
  Here each older release is imitated on the installed Keras; CI's pass on the oldest combination runs these
  tests, and the layer, QAT and saving tests, on the real one.
* The floors that ``pyproject.toml``, the README, ``ste`` and ``.ci/run`` state are the same.
* TensorFlow is no requirement of the package (a user keeps the build installed). Without it ``import ste``
  succeeds (the command line's ``list`` and ``show`` answer from their catalog), and every name of ste but
  ``__version__`` and ``errors`` raises ``ste.errors.MissingDependencyError`` with the pip command.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste._keras._requirements import MIN_KERAS, MIN_TENSORFLOW, check_requirements
from tests.helpers import extra_requirements, pyproject, without_tensorflow

ROOT = Path(__file__).resolve().parents[1]
TF_FLOOR = ".".join(map(str, MIN_TENSORFLOW))
KERAS_FLOOR = ".".join(map(str, MIN_KERAS))


@pytest.fixture(params=["this Keras", "Keras < 3.15"])
def keras_config(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The installed Keras, and the same with a transposed convolution's config written as Keras before 3.15 wrote
    it: without ``output_padding``."""
    if request.param == "Keras < 3.15":
        from keras.src.layers.convolutional.base_conv_transpose import BaseConvTranspose

        keras_get_config = BaseConvTranspose.get_config

        def get_config(self: Any) -> dict[str, Any]:
            config = dict(keras_get_config(self))
            config.pop("output_padding", None)
            return config

        monkeypatch.setattr(BaseConvTranspose, "get_config", get_config)
    return str(request.param)


def transposed_length(n: int, kernel: int, stride: int, output_padding: int) -> int:
    """The output length of a transposed convolution with padding "valid": (n - 1)·stride + kernel + output_padding."""
    return (n - 1) * stride + kernel + output_padding


@pytest.mark.parametrize(
    ("cls", "shape"),
    [
        (ste.layers.QuantConv1DTranspose, (6, 4)),
        (ste.layers.QuantConv2DTranspose, (6, 5, 4)),
        (ste.layers.QuantConv3DTranspose, (4, 5, 3, 2)),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_saved_transposed_convolution_keeps_its_output_padding(
    cls: type, shape: tuple[int, ...], keras_config: str, tmp_path: Path
) -> None:
    inputs = keras.Input(shape)
    model = keras.Model(inputs, cls(3, 3, strides=2, output_padding=1, kernel_quantizer="ste_tern", name="up")(inputs))
    expected = tuple(transposed_length(n, 3, 2, 1) for n in shape[:-1])  # 6 steps: 14, not 13
    assert model.output_shape[1:-1] == expected
    path = str(tmp_path / "up.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("up").output_padding == (1,) * len(expected)
    x = np.random.default_rng(0).normal(size=(2, *shape)).astype(np.float32)
    assert loaded(x).shape[1:-1] == expected
    np.testing.assert_array_equal(loaded(x), model(x))
    assert cls.from_config(model.get_layer("up").get_config()).output_padding == (1,) * len(expected)


def test_quantize_model_keeps_output_padding(keras_config: str) -> None:
    """Conv2DTranspose is quantized (QuantConv2DTranspose) and Conv1DTranspose stays float (a copy): both are
    rebuilt from the Keras layer's config."""
    wide, long = keras.Input((6, 5, 4)), keras.Input((7, 4))
    model = keras.Model(
        [wide, long],
        [
            keras.layers.Conv2DTranspose(3, 3, strides=2, output_padding=1)(wide),
            keras.layers.Conv1DTranspose(3, 3, strides=2, output_padding=1)(long),
        ],
    )
    with pytest.warns(UserWarning, match="Conv1DTranspose"):  # not covered by the int8 scheme: it stays float
        quantized = ste.quantize_model(model)
    expected = [(None, transposed_length(6, 3, 2, 1), transposed_length(5, 3, 2, 1), 3), (None, 16, 3)]
    assert [tuple(shape) for shape in quantized.output_shape] == expected
    assert [type(layer).__name__ for layer in quantized.layers if "Transpose" in type(layer).__name__] == [
        "QuantConv2DTranspose",
        "Conv1DTranspose",
    ]


def _without_renorm(layer: keras.layers.Layer) -> keras.layers.Layer:
    """The built layer as Keras before 3.14 makes it: no ``renorm`` attribute (batch renormalization came in 3.14;
    this Keras's ``build`` reads it)."""
    if hasattr(layer, "renorm"):
        object.__delattr__(layer, "renorm")
    assert not hasattr(layer, "renorm")
    return layer


def test_batch_norm_trains_where_keras_has_no_renorm() -> None:
    layer = ste.layers.BatchNormalization(epsilon=1e-3, momentum=0.9)
    x = np.random.default_rng(1).normal(2.0, 3.0, size=(4, 3, 5, 6)).astype(np.float32)
    layer.build(x.shape)
    _without_renorm(layer)
    y = layer(x, training=True)
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))  # the biased batch variance, as Keras normalizes
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-6)


def _floor(requirement: str, name: str) -> str:
    found = re.fullmatch(rf"{re.escape(name)}(\[[a-z-]+\])?>=([0-9.]+)", requirement)
    assert found, requirement
    return found.group(2)


def test_declared_floors_agree_and_ci_runs_them() -> None:
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    for build in ("tensorflow", "tensorflow-cpu", "tensorflow-macos"):
        assert _floor(extras[build][0], build) == TF_FLOOR
    assert _floor(extras["and-cuda"][0], "tensorflow") == TF_FLOOR and "[and-cuda]" in extras["and-cuda"][0]
    keras_requirement = [r for r in project["dependencies"] if r.startswith("keras")]
    assert len(keras_requirement) == 1 and _floor(keras_requirement[0], "keras") == KERAS_FLOOR
    python_floor = _floor(project["requires-python"], "")
    readme = (ROOT / "README.md").read_text()
    assert f"Python ≥ {python_floor}" in readme
    assert f"TensorFlow ≥ {TF_FLOOR}" in readme and f"Keras ≥ {KERAS_FLOOR}" in readme
    ci = (ROOT / ".ci" / "run").read_text()  # the oldest combination is a pass of CI
    assert f'FLOOR_PYTHON="{python_floor}"' in ci and f'FLOOR_TENSORFLOW="tensorflow=={TF_FLOOR}.*"' in ci
    assert f'FLOOR_KERAS="keras=={KERAS_FLOOR}.*"' in ci
    floor_row = re.search(
        rf"^\| {re.escape(python_floor)} \| `tensorflow` {re.escape(TF_FLOOR)}\.\d+ \| "
        rf"{re.escape(KERAS_FLOOR)}\.\d+ \|",
        readme,
        flags=re.MULTILINE,
    )
    assert floor_row, "the README's table of what CI runs names the floors"
    assert ci.count("FLOOR_TESTS=(") == 1 and "tests/qat" in ci.split("FLOOR_TESTS=(", 1)[1].split(")", 1)[0]


def test_tensorflow_is_an_extra_and_the_readme_commands_install_it() -> None:
    project = pyproject()["project"]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in project["dependencies"]}  # type: ignore[union-attr]
    assert not names & {"tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"}
    readme = (ROOT / "README.md").read_text()
    for extra in ("examples", "test"):  # the README's two commands
        assert f'pip install -e ".[{extra}]"' in readme
        assert "tensorflow" in extra_requirements(extra)


def test_too_old_tensorflow_or_keras_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    check_requirements()  # the installed releases pass
    monkeypatch.setattr(tf, "__version__", "2.15.1")
    fix = rf"TensorFlow 2\.15\.1\. Fix: pip install -U 'tensorflow>={TF_FLOOR}'"
    with pytest.raises(ste.errors.MissingDependencyError, match=fix):
        check_requirements()
    monkeypatch.setattr(tf, "__version__", f"{TF_FLOOR}.0-rc1")
    check_requirements()
    monkeypatch.setattr(keras, "__version__", "3.11.3")
    fix = rf"Keras 3\.11\.3\. Fix: pip install -U 'keras>={KERAS_FLOOR}'"
    with pytest.raises(ste.errors.MissingDependencyError, match=fix):
        check_requirements()


def _without_tensorflow(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = without_tensorflow(tmp_path)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_import_without_tensorflow_names_the_pip_command(tmp_path: Path) -> None:
    message = (
        f"ste needs TensorFlow {TF_FLOOR} or later, which is not installed. Fix: pip install 'ste[tensorflow]' (or "
        "the build you use: 'ste[tensorflow-cpu]', 'ste[tensorflow-macos]', 'ste[and-cuda]')."
    )
    # import ste succeeds (the command line answers list and show from its catalog); its version and errors are there
    check = "import ste; print(ste.__version__, ste.errors.MissingDependencyError.__name__)"
    done = _without_tensorflow(tmp_path, "-c", check)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{ste.__version__} MissingDependencyError\n", "")
    done = _without_tensorflow(tmp_path, "-c", "import ste; ste.forward")  # any other name: the reason and the fix
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ste.errors.MissingDependencyError: ste.forward is not available: {message}"
    )
    done = _without_tensorflow(tmp_path, "-c", "import ste; ste.no_such_name")  # not a name of ste: as before
    assert done.stderr.strip().splitlines()[-1] == "AttributeError: module 'ste' has no attribute 'no_such_name'"
    probe = "try:\n    from ste import forward\nexcept ImportError as error:\n    print(type(error).__name__)"
    done = _without_tensorflow(tmp_path, "-c", probe)  # code that probes for optional packages catches it
    assert (done.returncode, done.stdout) == (0, "MissingDependencyError\n")
    done = _without_tensorflow(tmp_path, "-m", "ste", "--help")  # answered without TensorFlow, as before
    assert done.returncode == 0 and done.stdout.startswith("usage: ste")
    done = _without_tensorflow(tmp_path, "-m", "ste", "list")  # built-in names: answered without TensorFlow
    assert done.returncode == 0 and "atan" in done.stdout and "ste_sign" in done.stdout
    done = _without_tensorflow(tmp_path, "-m", "ste", "check", "atan")  # the command line's one-line error
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"ste check: error: {message}\n")
