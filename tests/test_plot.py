"""ste.plot: the drawn curves equal numpy formulas; errors for what cannot be drawn or when matplotlib is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

import ste

pytest.importorskip("matplotlib")


def _lines(fig):  # (x, y) of the first line of each axes, top to bottom
    return [(np.asarray(ax.lines[0].get_xdata()), np.asarray(ax.lines[0].get_ydata())) for ax in fig.axes]


def test_surrogate_by_spec_draws_primitive_above_derivative():
    fig = ste.plot("sigmoid_surrogate(beta=4.0)", x=(-2.0, 2.0), points=81, dtype="float64")
    (x_top, primitive), (x_bottom, derivative) = _lines(fig)
    np.testing.assert_array_equal(x_top, np.linspace(-2.0, 2.0, 81))
    np.testing.assert_array_equal(x_top, x_bottom)
    s = 1.0 / (1.0 + np.exp(-4.0 * x_top))
    np.testing.assert_allclose(primitive, s, rtol=1e-12)
    np.testing.assert_allclose(derivative, 4.0 * s * (1.0 - s), rtol=1e-12, atol=1e-15)
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    assert "sigmoid_surrogate(beta=4.0)" in fig.texts[0].get_text()  # suptitle


def test_name_with_keyword_parameters_and_explicit_points():
    points = np.array([-1.5, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0])
    fig = ste.plot("straight_through", x=points, clip=0.5)
    (_, primitive), (x, derivative) = _lines(fig)
    np.testing.assert_array_equal(x, points.astype(np.float32))
    np.testing.assert_array_equal(primitive, np.clip(points, -0.5, 0.5))
    np.testing.assert_array_equal(derivative, (np.abs(points) <= 0.5).astype(np.float64))


def test_op_draws_forward_and_gradient_of_its_rule():
    op = ste.forward(tf.sign).backward("straight_through", clip=1.0)
    fig = ste.plot(op, x=(-3.0, 3.0), points=61)
    (x, forward), (_, gradient) = _lines(fig)
    np.testing.assert_array_equal(forward, np.sign(x))
    np.testing.assert_array_equal(gradient, (np.abs(x) <= 1.0).astype(np.float64))


def test_op_hyperparameters_are_passed():
    @ste.backward("identity")
    def scaled_step(x, height=1.0):
        return tf.cast(x > 0, x.dtype) * height

    (x, forward), (_, gradient) = _lines(ste.plot(scaled_step, points=31, height=3.0))
    np.testing.assert_array_equal(forward, 3.0 * (x > 0))
    np.testing.assert_array_equal(gradient, np.ones_like(x))


def test_savefig_writes_a_png(tmp_path):
    path = tmp_path / "rule.png"
    ste.plot("identity", figsize=(3, 2), dpi=50).savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("obj", "kwargs", "error", "needle"),
    [
        (42, {}, ste.errors.CallError, "received int"),
        ("sigmoid_surogate", {}, ste.errors.UnknownSurrogateError, "sigmoid_surrogate"),
        ("identity", {"x": (3.0, -3.0)}, ste.errors.CallError, "low < high"),
        ("identity", {"x": [1.0]}, ste.errors.CallError, "at least 2"),
        ("sigmoid_surrogate", {"beta": -1.0}, ste.errors.ParameterError, "beta"),
    ],
)
def test_errors(obj, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        ste.plot(obj, **kwargs)


def test_forward_without_rule_says_how_to_attach_one():
    with pytest.raises(ste.errors.MissingBackwardError, match="backward"):
        ste.plot(ste.forward(tf.sign))


def test_non_elementwise_op_is_refused():
    op = ste.forward(tf.reduce_sum).backward(lambda dy, x: dy * tf.ones_like(x))
    with pytest.raises(ste.errors.CallError, match="elementwise"):
        ste.plot(op)


def test_missing_matplotlib_raises_an_ste_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ste.errors.MissingDependencyError, match=r"pip install 'ste\[plot\]'") as caught:
        ste.plot("identity")
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, ValueError)


# --- ranges that show each entry's shape, peak marks, quantizers ------------------------------------------------


def _annotations(fig):
    return [text.get_text() for text in fig.axes[-1].texts]


@pytest.mark.parametrize(
    ("spec", "half_width"),
    [
        ("fast_sigmoid(slope=25.0)", (np.sqrt(2.0) - 1.0) / 25.0),  # 1/(1+k|x|)² = 1/2
        ("sigmoid_surrogate(beta=1.0)", np.log((1 + np.sqrt(0.5)) / (1 - np.sqrt(0.5)))),  # σ(1−σ) = 1/8
        ("gaussian(sigma=0.5)", 0.5 * np.sqrt(2.0 * np.log(2.0))),
        ("boxcar(width=1.0)", 0.5),  # the plateau
        ("straight_through(clip=2.0)", 2.0),
    ],
)
def test_default_range_spans_four_half_widths_at_half_maximum(spec, half_width):
    fig = ste.plot(spec, points=11)
    x, _ = _lines(fig)[-1]
    assert x[0] == -x[-1]  # centred on the peak at 0
    assert 4.0 * half_width * (1 - 1e-3) <= x[-1] <= 4.0 * half_width * 1.5  # rounded up to a round number


@pytest.mark.parametrize("name", ["identity", "zero"])
def test_constant_derivative_keeps_minus_3_to_3_and_has_no_peak_mark(name):
    fig = ste.plot(name)
    x, derivative = _lines(fig)[-1]
    assert (x[0], x[-1]) == (-3.0, 3.0)
    assert np.all(derivative == derivative[0])
    assert _annotations(fig) == [] and len(fig.axes[-1].lines) == 3  # the curve and the two axis lines


def test_plateau_is_marked_as_an_interval_with_its_exact_ends():
    fig = ste.plot("boxcar(width=1.0)")  # 1/width on |x| < width/2: the grid never hits ±0.5
    assert _annotations(fig) == ["peak 1 for x in [-0.5, 0.5]"]
    fig = ste.plot("straight_through(clip=0.7)", x=(-2.0, 2.0), points=100)
    assert _annotations(fig) == ["peak 1 for x in [-0.7, 0.7]"]


def test_single_peak_is_a_point():
    fig = ste.plot("sigmoid_surrogate(beta=4.0)", x=(-2.0, 2.0), points=401)
    assert _annotations(fig) == ["peak 1 at x = 0"]  # beta/4


@pytest.mark.parametrize("quantizer", ["ste_sign", "ste_sign(clip_value=1.0)", ste.larq.quantizers.SteSign])
def test_quantizer_names_classes_and_instances_are_drawn_as_forward_and_gradient(quantizer):
    if isinstance(quantizer, type):
        quantizer = quantizer()
    fig = ste.plot(quantizer, x=(-2.0, 2.0), points=41)
    (x, forward), (_, gradient) = _lines(fig)
    np.testing.assert_array_equal(forward, np.where(x >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(gradient, (np.abs(x) <= 1.0).astype(np.float64))
    assert "SteSign" in fig.texts[0].get_text()


def test_multi_bit_quantizer_and_a_shared_name_means_the_surrogate():
    (x, forward), (_, gradient) = _lines(ste.plot("dorefa(bits=2)", x=(-1.0, 2.0), points=61, dtype="float64"))
    np.testing.assert_allclose(forward, np.round(3.0 * np.clip(x, 0.0, 1.0)) / 3.0)
    np.testing.assert_array_equal(gradient, ((x >= 0) & (x <= 1)).astype(np.float64))
    fig = ste.plot("approx_sign", x=(-2.0, 2.0), points=41)  # a surrogate and a quantizer: the surrogate
    assert fig.texts[0].get_text() == "approx_sign()"
    fig = ste.plot(ste.quantizers.get("approx_sign"), x=(-2.0, 2.0), points=41)
    assert "ApproxSign" in fig.texts[0].get_text()


def test_quantizer_with_keyword_parameters_is_refused():
    with pytest.raises(ste.errors.CallError, match="spec string"):
        ste.plot("ste_sign", clip_value=2.0)
