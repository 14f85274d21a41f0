"""Every extension point is an abstract base class: a subclass missing an abstract method is refused when it is
instantiated (or registered) with ste.errors.MissingMethodError, which names the method, its base and the fix;
optional capabilities are declared by deriving from a small abstract base."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste


class _NoDerivative(ste.registry.Surrogate):
    pass


class _NoForward(ste.quantizers.SurrogateQuantizer):
    pass


class _NoStep(ste.spiking.LeakyCell):
    pass


class _NoCall(ste.quantizers.Quantizer):
    pass


class _NoScheme(ste.qat.Scheme):
    pass


class _NoSchedule(ste.sparsity.PruningSchedule):
    pass


class _NoPrunable(keras.layers.Layer, ste.sparsity.PrunableLayer):
    pass


class _NoClusterable(keras.layers.Layer, ste.clustering.ClusterableLayer):
    pass


class _NoMask(ste.registry.Surrogate, ste.registry.MaskOnly):
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return tf.ones_like(x)


@pytest.mark.parametrize(
    "cls,missing,base",
    [
        (_NoDerivative, "derivative", "Surrogate"),
        (_NoForward, "forward_fn", "SurrogateQuantizer"),
        (_NoStep, "step", "SpikingCell"),
        (_NoCall, "call", "Quantizer"),
        (_NoMask, "mask", "MaskOnly"),
        (_NoScheme, "role", "Scheme"),
        (_NoSchedule, "__call__", "PruningSchedule"),
        (_NoPrunable, "get_prunable_weights", "PrunableLayer"),
        (_NoClusterable, "get_clusterable_weights", "ClusterableLayer"),
    ],
)
def test_an_incomplete_subclass_is_refused_at_instantiation(cls: type, missing: str, base: str) -> None:
    with pytest.raises(ste.errors.MissingMethodError) as info:
        cls()
    message = str(info.value)
    assert isinstance(info.value, TypeError)
    for fragment in (cls.__qualname__, missing, base, "Fix: define"):
        assert fragment in message, (fragment, message)


def test_the_refusal_comes_before_the_constructor_runs() -> None:
    ran: list[str] = []

    class Incomplete(ste.quantizers.Quantizer):
        def __init__(self, scale: float = 2.0, **kwargs: Any) -> None:
            ran.append("init")
            super().__init__(**kwargs)

    class Schedule(ste.sparsity.PruningSchedule):
        def __init__(self, steps: int) -> None:
            ran.append("init")

    for cls, arguments in ((Incomplete, {"scale": 3.0}), (Schedule, {"steps": 4})):
        with pytest.raises(ste.errors.MissingMethodError, match=f"cannot instantiate {cls.__qualname__}"):
            cls(**arguments)  # type: ignore[abstract]
        parameters = list(inspect.signature(cls).parameters)
        assert parameters == list(inspect.signature(cls.__init__).parameters)[1:], parameters
    assert ran == []


def test_a_complete_plain_subclass_takes_only_its_arguments() -> None:
    class Never(ste.sparsity.PruningSchedule):
        def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
            return tf.constant(False), tf.constant(0.0)

        def get_config(self) -> dict[str, Any]:
            return {}

    assert not bool(Never()(3)[0])
    with pytest.raises(TypeError, match="takes no arguments"):
        Never(5)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "register,cls",
    [
        (lambda cls: ste.registry.register("incomplete_entry", cls), _NoDerivative),
        (lambda cls: ste.spiking.register_neuron("incomplete_entry")(cls), _NoStep),
    ],
    ids=["surrogate", "neuron"],
)
def test_an_incomplete_class_is_refused_at_registration(register: Any, cls: type) -> None:
    with pytest.raises(ste.errors.MissingMethodError, match="Fix: define"):
        register(cls)
    assert "incomplete_entry" not in ste.registry.names() + ste.spiking.neurons()


def test_capabilities_are_declared_by_base_class() -> None:
    class Plain(ste.registry.Surrogate):
        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            return tf.ones_like(x)

        def primitive(self, x: tf.Tensor) -> tf.Tensor:  # not declared: not used as the reference
            return x

    class Declared(Plain, ste.registry.HasPrimitive):
        pass

    assert not Plain().has_primitive and Declared().has_primitive
    assert not Plain().mask_only
    assert ste.registry.get("straight_through").mask_only and ste.registry.get("boxcar").mask_only


def test_a_subclass_that_changes_the_step_does_not_inherit_the_nir_form() -> None:
    class Faster(ste.spiking.LIFCell):
        def step(self, inputs: tf.Tensor, states: Any) -> Any:
            return super().step(2 * inputs, states)

    assert ste.spiking.LIFCell.nir_form == "lif" and Faster.nir_form is None


#: NIR's neuron nodes ste exports (nir.LIF, IF, LI, CubaLIF, and the recurrent LIF and CubaLIF graphs), by the form
#: a cell declares: the forms ste.spiking.to_nir knows.
_NIR_NODES = {"lif", "if", "li", "cuba_lif", "recurrent_lif", "recurrent_cuba_lif"}


def test_a_neuron_declaring_an_unknown_nir_form_is_refused_at_registration() -> None:
    """A misspelt NIR form ("lfi") is refused by register_neuron, naming the known forms; every form to_nir exports
    is accepted."""
    from ste.spiking._nir._neuron_export import _FORMS

    assert set(_FORMS) == _NIR_NODES

    class Typo(ste.spiking.LIFCell):
        nir_form = "lfi"

    with pytest.raises(ste.errors.RegistrationError, match=r"nir_form = 'lfi'.*cuba_lif.*Fix: ") as caught:
        ste.spiking.register_neuron("typo_lif")(Typo)
    assert all(form in str(caught.value) for form in _NIR_NODES)
    assert "typo_lif" not in ste.spiking.neurons()
    for form in sorted(_NIR_NODES):
        declared = type("Declared", (ste.spiking.LIFCell,), {"nir_form": form, "__module__": __name__})
        ste.spiking.register_neuron("declared_form")(declared)
        ste.spiking.unregister_neuron("declared_form")


def test_li_steps_like_the_other_neurons() -> None:
    x = np.random.default_rng(1).normal(size=(2, 6, 3)).astype("float32")
    got = ste.spiking.LI(beta=0.7)(x).numpy()
    u, expected = np.zeros((2, 3), np.float32), []
    for t in range(6):
        u = np.float32(0.7) * u + x[:, t]
        expected.append(u)
    np.testing.assert_allclose(got, np.stack(expected, axis=1), rtol=1e-6)


def test_the_base_layer_names_the_cell_class_it_needs() -> None:
    with pytest.raises(ste.errors.MissingMethodError, match="cell_class SpikingCell is abstract .*step.*Fix: "):
        ste.spiking.SpikingRNN()
