"""larq 0.14's test fixtures (larq/conftest.py) on Keras 3: ``quantized`` enters ``lq.context.quantized_scope``,
``distribute_scope`` a MirroredStrategy over the two logical CPUs of tests/conftest.py. larq's graph-mode fixtures
(TF1 sessions) have no Keras 3 counterpart: the ported tests run eagerly and inside ``tf.function``. ``run`` is the
quantizer tests' forward-and-backward run, for the formula tests of ste.larq's quantizers."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import pytest
import tensorflow as tf

import ste.larq as lq
from tests.quantizers.conftest import run_quantizer

#: What larq 0.14 itself gave (tests/larq_port/make_reference.py, run in the larq venv).
REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "larq_reference.json").read_text())


@pytest.fixture(params=[False, True], ids=["no_strategy", "mirrored"])
def distribute_scope(request):
    if request.param:
        with tf.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
        ).scope():
            yield True
    else:
        yield False


@pytest.fixture(params=[True, False], ids=["quantized", "latent"])
def quantized(request):
    with lq.context.quantized_scope(request.param):
        yield request.param


@pytest.fixture(params=["channels_last", "channels_first"])
def data_format(request):
    return request.param


@pytest.fixture(autouse=True)
def _clear_session():
    keras.backend.clear_session()  # larq's models tests name layers from a fresh session
    yield


@pytest.fixture
def run():
    """A quantizer run forward and backward with a non-trivial upstream gradient (tests/quantizers/conftest.py)."""
    return run_quantizer
