"""Bad input to ste.sparsity beyond the TFMOT parity cases (test_tfmot_parity.py): an ste error, raised before
anything changes, that names the op, what it received and the fix."""

from __future__ import annotations

import keras
import pytest

import ste

S = ste.sparsity


def dense() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])


def assert_good_error(info: pytest.ExceptionInfo, *fragments: str) -> None:
    assert isinstance(info.value, ste.STEError), type(info.value)
    message = str(info.value)
    assert "ste.sparsity" in message and "Fix" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


class NoCall(S.PruningSchedule):
    def get_config(self):
        return {}


class NoConfig(S.PruningSchedule):
    def __call__(self, step):
        return True, 0.5


@pytest.mark.parametrize("schedule,missing", [(NoCall, "__call__"), (NoConfig, "get_config")])
def test_a_schedule_subclass_missing_a_method_is_refused_at_instantiation(schedule, missing):
    with pytest.raises(ste.errors.MissingMethodError) as info:
        schedule()
    assert_good_error(info, schedule.__name__, missing, "PruningSchedule")
    assert isinstance(info.value, TypeError)  # as Python's own refusal of an abstract class


@pytest.mark.parametrize(
    "call,fragments",
    [
        (lambda: S.strip_pruning(3), ("int",)),
        (lambda: S.prune_low_magnitude(dense(), sparsity_m_by_n=(2.0, 4.0)), ("sparsity_m_by_n=(2, 4)",)),
        (lambda: S.prune_low_magnitude(dense(), block_pooling_type="max"), ("block_pooling_type='MAX'",)),
        (lambda: S.prune_low_magnitude(dense(), gradient="SR_STE"), ("gradient='sr_ste'",)),
        (lambda: S.prune_low_magnitude(dense(), gradient="sr_ste", decay="0.1"), ("decay", "'0.1'")),
        (lambda: S.PolynomialDecay(0.1, 0.5, 0, -1), ("end_step", "-1")),
        (lambda: S.PolynomialDecay(0.1, 0.5, 0, 10, power="3"), ("power", "'3'")),
        (lambda: S.ConstantSparsity(0.5, 0, frequency=2.0), ("frequency=2",)),
    ],
)
def test_more_bad_input_names_the_fix(call, fragments):
    with pytest.raises(ste.STEError) as info:
        call()
    assert_good_error(info, *fragments)


@pytest.mark.parametrize("value", [(1, 1, 1), (0, 0)])
def test_block_size_fix_is_a_valid_block_size(value):
    with pytest.raises(ste.STEError) as info:
        S.prune_low_magnitude(dense(), block_size=value)
    assert_good_error(info, "block_size")


@pytest.mark.parametrize(
    "arguments,fragments",
    [
        ({"block_pooling_type": "MIN"}, ("ste.sparsity.PruneLowMagnitude", "block_pooling_type", "'MIN'")),
        ({"block_pooling_type": "max"}, ("block_pooling_type='MAX'",)),
        ({"block_size": (0, 2)}, ("block_size",)),
        ({"sparsity_m_by_n": (4, 4)}, ("sparsity_m_by_n", "(4, 4)")),
        ({"gradient": "straight"}, ("gradient",)),
        ({"pruning_schedule": 0.5}, ("ConstantSparsity(0.5, begin_step=0)",)),
        ({"gradient": "masked", "decay": 0.1}, ("decay=0.1",)),
    ],
)
def test_the_wrapper_built_directly_checks_its_arguments(arguments, fragments):
    """TFMOT's PruneLowMagnitude refuses a block_pooling_type other than 'AVG'/'MAX' (ValueError); ste's wrapper
    checks every argument as prune_low_magnitude does, naming itself."""
    with pytest.raises(ste.STEError) as info:
        S.PruneLowMagnitude(keras.layers.Dense(3), **arguments)
    assert_good_error(info, "PruneLowMagnitude", *fragments)


def test_the_wrapper_built_directly_refuses_a_model_and_a_wrapper():
    with pytest.raises(ste.errors.ParameterTypeError, match=r"not a model.*Fix:"):
        S.PruneLowMagnitude(dense())
    with pytest.raises(ste.errors.ParameterError, match=r"already pruned.*Fix:"):
        S.PruneLowMagnitude(S.PruneLowMagnitude(keras.layers.Dense(3)))


@pytest.mark.parametrize("log_dir", ["", None, 3])
def test_pruning_summaries_needs_a_log_dir(log_dir):
    """TFMOT: "`log_dir` must be a non-empty string" (ValueError)."""
    with pytest.raises(ste.errors.ParameterError) as info:
        S.PruningSummaries(log_dir=log_dir)
    assert_good_error(info, "log_dir", repr(log_dir))
