"""larq 0.14's larq/models_test.py under ``import ste.larq as lq``: ``lq.models.ModelProfile`` and
``lq.models.summary`` count as larq does. The printed tables are compared with what larq 0.14 itself printed for the
same models (tests/data/larq_reference.json) and with larq's own snapshots (larq/snapshots/snap_models_test.py)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
import ste.larq as lq
from ste.larq.models import ModelProfile
from tests.larq_port import larq_models
from tests.larq_port.conftest import REFERENCE

pytestmark = pytest.mark.filterwarnings("ignore:.*has a binary")


class ToyModel(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = lq.layers.QuantConv2D(32, (3, 3), kernel_quantizer="ste_sign", padding="same")
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.dense = keras.layers.Dense(10, activation="softmax")

    def call(self, inputs):
        return self.dense(self.pool(self.conv(inputs)))


def get_profile_model():
    return larq_models.profile_model(lq, keras)


def get_model_1d():
    return larq_models.model_1d(lq, keras)


def get_submodel_profile_model(start_index=2, end_index=5):
    model = get_profile_model()
    submodel = keras.Sequential(model.layers[start_index:end_index])
    return keras.Sequential(
        [keras.Input((64, 64, 1)), *model.layers[:start_index], submodel, *model.layers[end_index:]]
    )


def test_model_profile():
    assert len(ModelProfile(get_profile_model()).layer_profiles) == 7


@pytest.mark.parametrize("name, build", [("profile", get_profile_model), ("1d", get_model_1d)])
def test_layer_profile_as_larq_computes_it(name, build):
    profiles = ModelProfile(build()).layer_profiles
    reference = REFERENCE["summary"][name]["layers"]
    assert len(profiles) == len(reference)
    for ours, larqs in zip(profiles, reference):
        assert ours.input_precision == larqs["input_precision"]
        assert list(ours.output_shape) == larqs["output_shape"]
        assert ours.output_pixels == larqs["output_pixels"]
        assert ours.weight_count() == larqs["weight_count"]
        assert ours.weight_count(trainable=True) == larqs["trainable_count"]
        assert ours.unique_param_bidtwidths == larqs["unique_param_bidtwidths"]
        assert ours.unique_op_precisions == larqs["unique_op_precisions"]
        assert ours.memory == larqs["memory"]
        assert ours.fp_equivalent_memory == larqs["fp_equivalent_memory"]
        assert ours.int8_fp_weights_memory == larqs["int8_fp_weights_memory"]
        assert ours.op_count("mac") == larqs["macs"]
        assert ours.op_count("mac", 1) == larqs["binary_macs"]


def test_layer_profile():
    """larq's hand-written expectations (larq/models_test.py)."""
    profiles = ModelProfile(get_profile_model()).layer_profiles
    kernel_count = [32 * 3 * 3 * 1, 0, 32 * 3 * 3, 0, 32 * 3 * 3 * 1 + 32 * 1 * 1 * 32, 0, 32 * 11 * 11 * 10]
    bias_count = [32, 0, 0, 64, 32, 0, 10]
    param_count = [k + b for k, b in zip(kernel_count, bias_count)]
    memory = [
        1 * (32 * 3 * 3 * 1) + 32 * 32,
        0,
        2 * (32 * 3 * 3),
        32 * (2 * 32),
        1 * (32 * 3 * 3 * 1 + 32 * 1 * 1 * 32) + 32 * 32,
        0,
        32 * (32 * 11 * 11 * 10 + 10),
    ]
    int8_fp_weights_mem = [
        1 * (32 * 3 * 3 * 1) + 8 * 32,
        0,
        2 * (32 * 3 * 3),
        8 * (32 * 2),
        1 * (32 * 3 * 3 * 1 + 32 * 1 * 1 * 32) + 8 * 32,
        0,
        8 * (32 * 11 * 11 * 10 + 10),
    ]
    input_precision = [None, None, 2, None, 1, None, None]
    output_shape = [
        (-1, 64, 64, 32),
        (-1, 32, 32, 32),
        (-1, 11, 11, 32),
        (-1, 11, 11, 32),
        (-1, 11, 11, 32),
        (-1, 11 * 11 * 32),
        (-1, 10),
    ]
    output_pixels = [int(np.prod(shape[1:-1])) for shape in output_shape]
    unique_param_bidtwidths = [[1, 32], [], [2], [32], [1, 32], [], [32]]
    unique_op_precisions = [[32], [], [2], [], [1], [], [32]]
    mac_count = [params * pixels for params, pixels in zip(kernel_count, output_pixels)]
    bin_mac_count = [
        mc if (1 in pb and ip == 1) else 0 for mc, pb, ip in zip(mac_count, unique_param_bidtwidths, input_precision)
    ]
    for i, profile in enumerate(profiles):
        assert profile.input_precision == input_precision[i]
        assert profile.output_shape == output_shape[i]
        assert profile.output_pixels == output_pixels[i]
        assert profile.weight_count() == param_count[i]
        assert profile.unique_param_bidtwidths == unique_param_bidtwidths[i]
        assert profile.unique_op_precisions == unique_op_precisions[i]
        assert profile.memory == memory[i]
        assert profile.fp_equivalent_memory == 32 * param_count[i]
        assert profile.int8_fp_weights_memory == int8_fp_weights_mem[i]
        assert profile.op_count("mac") == mac_count[i]
        assert profile.op_count("mac", 1) == bin_mac_count[i]


@pytest.mark.parametrize("name, build", [("profile", get_profile_model), ("1d", get_model_1d)])
@pytest.mark.parametrize("include_macs", [True, False])
def test_summary_prints_what_larq_prints(name, build, include_macs, capsys):
    lq.models.summary(build(), include_macs=include_macs)
    key = "printed" if include_macs else "printed_no_macs"
    assert capsys.readouterr().out == REFERENCE["summary"][name][key]


LARQ_SNAPSHOT_NO_WEIGHTS = """+sequential_1 stats--------------------+
| Layer   Input prec.  Outputs  Memory |
|               (bit)             (kB) |
+--------------------------------------+
| lambda            -     (2,)       0 |
+--------------------------------------+
| Total                              0 |
+--------------------------------------+
+sequential_1 summary-------------------+
| Total params                   0      |
| Trainable params               0      |
| Non-trainable params           0      |
| Model size                     0.00 B |
| Model size (8-bit FP weights)  0.00 B |
| Float-32 Equivalent            0.00 B |
| Compression Ratio of Memory    0.00   |
| Number of MACs                 0      |
+---------------------------------------+
"""


def test_summary_of_a_model_without_weights(capsys):  # larq's snapshot 'test_summary 2'
    model = keras.Sequential([keras.Input((32, 32)), keras.layers.Lambda(lambda x: tf.zeros(2))], name="sequential_1")
    lq.models.summary(model)
    assert capsys.readouterr().out == LARQ_SNAPSHOT_NO_WEIGHTS


def test_submodel_summary(capsys):
    default_profile = ModelProfile(get_profile_model())
    submodel_profile = ModelProfile(get_submodel_profile_model(start_index=2, end_index=5))
    submodel_layer_profile = submodel_profile.layer_profiles[2]
    profiles = default_profile.layer_profiles[2:5]
    assert submodel_layer_profile.input_precision == profiles[0].input_precision
    assert submodel_layer_profile.output_shape == profiles[-1].output_shape
    assert submodel_layer_profile.weight_count() == sum(p.weight_count() for p in profiles)
    assert set(submodel_layer_profile.unique_param_bidtwidths) == {
        b for p in profiles for b in p.unique_param_bidtwidths
    }
    assert set(submodel_layer_profile.unique_op_precisions) == {b for p in profiles for b in p.unique_op_precisions}
    assert submodel_layer_profile.memory == sum(p.memory for p in profiles)
    assert submodel_layer_profile.fp_equivalent_memory == sum(p.fp_equivalent_memory for p in profiles)
    assert submodel_layer_profile.int8_fp_weights_memory == sum(p.int8_fp_weights_memory for p in profiles)
    assert submodel_layer_profile.op_count("mac") == sum(p.op_count("mac") for p in profiles)
    assert submodel_layer_profile.op_count("mac", 1) == sum(p.op_count("mac", 1) for p in profiles)
    assert submodel_profile.generate_summary() == default_profile.generate_summary()


def test_subclass_model_summary(capsys):
    """larq's snapshot 'test_subclass_model_summary 1': its summary lines (Keras 3 gives the subclassed model's
    layers no output shape either, so they show "multiple")."""
    model = ToyModel(name="toy_model")
    model(np.zeros((1, 32, 32, 3), "float32"))
    lq.models.summary(model)
    out = capsys.readouterr().out
    for line in (
        "| quant_conv2d                        -  multiple      864        32    0.23 |",
        "| Total params                   1.23 k   |",
        "| Model size                     1.52 KiB |",
        "| Model size (8-bit FP weights)  470.00 B |",
        "| Float-32 Equivalent            4.79 KiB |",
        "| Compression Ratio of Memory    0.32     |",
    ):
        assert line in out


def test_summary_invalid_model():
    with pytest.raises(ValueError):
        lq.models.summary(keras.Model())


def test_summary_names_the_unbuilt_layers_of_a_built_model():
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__(name="subclassed")
            self.dense = keras.layers.Dense(2)

        def build(self, input_shape):
            self.built = True  # the layer its call uses is left unbuilt

        def call(self, x):
            return self.dense(x)

    model = Subclassed()
    model.build((None, 3))
    with pytest.raises(ste.errors.NotBuiltError, match=r"lq.models.summary\(model\).*\['dense'\].*Fix: call the"):
        lq.models.summary(model)


def test_bitsize_invalid_key():
    with pytest.raises(NotImplementedError):
        lq.models._bitsize_as_str(-1)


def test_number_as_readable_str_large():
    assert lq.models._number_as_readable_str(1e16) == "1.00E+16"


def test_ste_summary_keeps_its_own_conventions():
    """Side by side (docs/larq.md): ste counts batch norm's beta and the float32 ÷ quantized ratio."""
    model = get_profile_model()
    profile, summary = ModelProfile(model), ste.summary(model, print_fn=None)
    assert summary.total_params == model.count_params() == profile.weight_count() + 32  # + batch norm's beta
    assert summary.deployment_params_total == profile.weight_count()
    np.testing.assert_allclose(1 / summary.compression_ratio, profile.memory / profile.fp_equivalent_memory, rtol=0.01)
