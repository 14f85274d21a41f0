"""The model rewriter behind QAT, pruning and clustering: every kind of Keras 3 model (graphs with operation nodes,
nested, subclassed, functional subclasses, composite layers at any depth, shared layers), the model given never
changed, the result never compiled, ``filters``, ``strict``, and the errors for what cannot be transformed.

Each test runs the three transformations through their public calls. What a transformed layer computes is checked
against numpy elsewhere (tests/qat, tests/sparsity, tests/clustering); here the references are the model's own
structure (which weights exist, which classes hold them) and numpy formulas of a mask and of clustered values."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

L = keras.layers
S, C = ste.sparsity, ste.clustering


def prune(model: keras.Model, **kwargs: Any) -> keras.Model:
    return S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1), **kwargs)


def cluster(model: keras.Model, **kwargs: Any) -> keras.Model:
    return C.cluster_weights(model, 3, "LINEAR", **kwargs)


def quantize(model: keras.Model, **kwargs: Any) -> keras.Model:
    return ste.quantize_model(model, **kwargs)


TRANSFORMS: dict[str, Callable[..., keras.Model]] = {"qat": quantize, "prune": prune, "cluster": cluster}
#: The class a transformation gives a Dense kernel's layer (QAT: in a rebuilt graph, or inside a composite layer).
TRANSFORMED = {
    "qat": (ste.layers.QuantDense,),
    "prune": (S.PruneLowMagnitude,),
    "cluster": (C.ClusterWeights,),
}


def weights(model: keras.Model) -> list[np.ndarray]:
    return [np.array(w.numpy()) for w in model.weights]


def kernels(model: keras.Model) -> dict[str, int]:
    """``path: size`` of every weight of rank >= 2 that is not a bias (numpy's count of the model's values)."""
    return {w.path: int(np.prod(w.shape)) for w in model.weights if len(w.shape) >= 2 and "bias" not in w.name}


def transformed_layers(model: keras.Model, name: str) -> list[keras.layers.Layer]:
    return [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, TRANSFORMED[name])]


def transformed_names(model: keras.Model, name: str) -> set[str]:
    """The names of the layers a transformation reached (a wrapper's: the layer it wraps)."""
    return {getattr(layer, "layer", layer).name for layer in transformed_layers(model, name)}


def layer_ids(model: keras.Model) -> set[int]:
    return {id(layer) for layer in model._flatten_layers(include_self=True)}


def variable_ids(model: keras.Model) -> set[int]:
    return {id(variable) for variable in model.weights}


def unchanged(model: keras.Model, before: list[np.ndarray], result: keras.Model) -> None:
    """``model`` holds the values it held before, and shares no layer or variable with ``result``."""
    for old, now in zip(before, weights(model)):
        np.testing.assert_array_equal(old, now)
    assert not (layer_ids(model) & layer_ids(result))
    assert not (variable_ids(model) & variable_ids(result))


# -- models of every kind ----------------------------------------------------------------------------------------


def with_operations() -> keras.Model:
    """A functional graph with operation nodes that are not layers: ``x + y``, ``x[:, 0]``, ``keras.ops``."""
    inputs = keras.Input((4, 6))
    x = L.Dense(8, name="a")(inputs)
    y = L.Dense(8, name="b")(inputs)
    z = keras.ops.multiply(x + y, 0.5)
    first = z[:, 0]
    return keras.Model(inputs, L.Dense(3, name="head")(first))


class Block(L.Layer):
    """A composite layer: Dense sublayers as an attribute, in a list and in a dict, and a nested composite."""

    def __init__(self, units: int = 6, inner: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units, self.inner = units, inner
        self.first = L.Dense(units, name="first")
        self.stack = [L.Dense(units, name=f"stack_{i}") for i in range(2)]
        self.named = {"gate": L.Dense(units, name="gate")}
        self.child = Block(units, inner=False, name="child") if inner else None

    def build(self, input_shape: Any) -> None:
        self.first.build(input_shape)
        for layer in self.stack:
            layer.build((*input_shape[:-1], self.units))
        self.named["gate"].build((*input_shape[:-1], self.units))
        if self.child is not None:
            self.child.build((*input_shape[:-1], self.units))

    def call(self, x: Any) -> Any:
        x = self.first(x)
        for layer in self.stack:
            x = layer(x)
        x = x * keras.ops.sigmoid(self.named["gate"](x))
        return x if self.child is None else self.child(x)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units, "inner": self.inner}


def with_composite() -> keras.Model:
    inputs = keras.Input((5,))
    return keras.Model(inputs, L.Dense(2, name="head")(Block(name="block")(inputs)))


class Subclassed(keras.Model):
    """A subclassed model: its call is Python code, its layers attributes (one of them a composite)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.block = Block(name="block")
        self.head = L.Dense(2, name="head")

    def call(self, x: Any, training: Any = None) -> Any:  # Keras's fit passes training only to a call that takes it
        return self.head(self.block(x))


class Backbone(keras.Model):
    """A functional model whose class keeps a config of its own (as KerasHub's backbones do)."""

    def __init__(self, width: int = 6, **kwargs: Any) -> None:
        inputs = keras.Input((5,), name="features")
        self.encoder = L.Dense(width, name="encoder")
        x = self.encoder(inputs)
        outputs = L.Dense(3, name="head")(x + keras.ops.tanh(x))
        super().__init__(inputs, outputs, **kwargs)
        self.width = width

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "width": self.width}


def subclassed() -> keras.Model:
    model = Subclassed(name="subclassed")
    model(np.zeros((1, 5), np.float32))
    return model


MODELS: dict[str, Callable[[], keras.Model]] = {
    "operations": with_operations,
    "composite": with_composite,
    "subclassed": subclassed,
    "functional subclass": lambda: Backbone(name="backbone"),
}


def sample(model: keras.Model) -> np.ndarray:
    shape = tuple(model.inputs[0].shape[1:]) if getattr(model, "inputs", None) else (5,)
    return np.random.default_rng(0).normal(size=(2, *shape)).astype(np.float32)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_every_kind_of_model_reaches_every_dense_kernel_and_leaves_the_model_given_unchanged(kind, name) -> None:
    keras.utils.set_random_seed(1)
    model = MODELS[kind]()
    before = weights(model)
    x = sample(model)
    expected = np.asarray(model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every weight covered: no warning
        result = TRANSFORMS[name](model)
    assert type(result) is type(model)
    assert not result.compiled
    unchanged(model, before, result)
    np.testing.assert_array_equal(np.asarray(model(x)), expected)
    # every Dense of the model (numpy's count of its kernels) is transformed, once, wherever it sits
    dense = [layer for layer in model._flatten_layers() if type(layer) is L.Dense]
    assert len(transformed_layers(result, name)) == len(dense)
    out = np.asarray(result(x))
    assert out.shape == expected.shape and np.isfinite(out).all()
    if name == "prune":  # masks all True before training: the pruned model computes what the model does
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_pruning_trains_every_kernel_to_its_numpy_mask_and_strip_keeps_the_class(kind) -> None:
    """One training step at 50 % sparsity: every kernel of the stripped model has numpy's mask (the smaller half
    of |w| zero) and the stripped model is the class of the model given."""
    keras.utils.set_random_seed(2)
    model = MODELS[kind]()
    pruned = prune(model)
    pruned.compile("sgd", "mse")
    x = sample(model)
    pruned.fit(x, np.zeros_like(np.asarray(model(x))), epochs=1, verbose=0, callbacks=[S.UpdatePruningStep()])
    stripped = S.strip_pruning(pruned)
    assert type(stripped) is type(model) and not layer_ids(stripped) & layer_ids(pruned)
    found = kernels(stripped)
    assert set(found) == set(kernels(model)) or len(found) == len(kernels(model))
    for variable in stripped.weights:
        if len(variable.shape) >= 2 and "bias" not in variable.name:
            values = variable.numpy()
            assert (values == 0).sum() == values.size // 2, variable.path
    np.testing.assert_allclose(np.asarray(stripped(x)), np.asarray(pruned(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_clustering_gives_each_stripped_kernel_its_numpy_clusters(kind) -> None:
    """Linear centroids (numpy: 3 evenly spaced between each kernel's min and max), each weight its nearest one."""
    keras.utils.set_random_seed(3)
    model = MODELS[kind]()
    stripped = C.strip_clustering(cluster(model))
    assert type(stripped) is type(model)
    originals = {w.path: w.numpy() for w in model.weights}
    for variable in stripped.weights:
        if len(variable.shape) < 2 or "bias" in variable.name:
            continue
        source = originals[variable.path] if variable.path in originals else None
        values = variable.numpy()
        assert np.unique(values).size <= 3, variable.path
        if source is not None:
            centroids = np.linspace(source.min(), source.max(), 3)
            nearest = centroids[np.argmin(np.abs(source[..., None] - centroids), axis=-1)]
            np.testing.assert_allclose(values, nearest, rtol=1e-6, atol=1e-7)


def test_operation_nodes_are_called_again_as_they_are() -> None:
    model = with_operations()
    ops = sorted(type(op).__name__ for op in model.operations if not isinstance(op, L.Layer))
    for name, transform in TRANSFORMS.items():
        result = transform(model)
        assert sorted(type(op).__name__ for op in result.operations if not isinstance(op, L.Layer)) == ops, name


def test_a_shared_layer_stays_one_layer_and_a_shared_sublayer_is_swapped_everywhere() -> None:
    class Twice(L.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.dense = L.Dense(5, name="dense")
            self.alias = self.dense  # the same layer under two attributes

        def build(self, input_shape: Any) -> None:
            self.dense.build(input_shape)

        def call(self, x: Any) -> Any:
            return self.alias(self.dense(x))

    inputs = keras.Input((5,))
    shared = L.Dense(5, name="shared")
    model = keras.Model(inputs, Twice(name="twice")(shared(shared(inputs))))
    pruned = prune(model)
    wrappers = transformed_layers(pruned, "prune")
    assert len(wrappers) == 2  # one per layer object: the shared Dense, and the Dense behind both attributes
    twice = pruned.get_layer("twice")
    assert twice.dense is twice.alias and isinstance(twice.dense, S.PruneLowMagnitude)


def test_filters_select_by_name_class_or_predicate() -> None:
    model = with_composite()
    everything = transformed_names(prune(model), "prune")
    assert everything == {"first", "stack_0", "stack_1", "gate", "head"}
    cases: dict[str, Any] = {
        "regex": "^stack_",
        "class": L.Dense,
        "predicate": lambda layer: layer.name != "head",
        "list": ["^first$", lambda layer: layer.name == "gate"],
    }
    expected = {
        "regex": {"stack_0", "stack_1"},
        "class": everything,
        "predicate": everything - {"head"},
        "list": {"first", "gate"},
    }
    for case, filters in cases.items():
        for name, transform in TRANSFORMS.items():
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a layer selected out is left alone without a word
                result = transform(model, filters=filters)
            assert transformed_names(result, name) == expected[case], (case, name)


def test_bad_filters_are_refused_naming_the_fix() -> None:
    with pytest.raises(ste.errors.ParameterError, match="not a regular expression.*Fix"):
        prune(with_composite(), filters="[unclosed")
    with pytest.raises(ste.errors.ParameterTypeError, match="filters must be.*Fix"):
        cluster(with_composite(), filters=3)
    with pytest.raises(ste.errors.ParameterError, match="filters selects layers of a model"):
        S.prune_low_magnitude(L.Dense(2), filters="dense")


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("filters", ["^no such layer$", [], lambda layer: None], ids=["regex", "empty", "none"])
def test_a_filter_that_selects_nothing_is_refused_naming_what_it_could_select(name, filters) -> None:
    """Not a model handed back unchanged with no word: the error lists the layers the filter was asked about."""
    model = with_composite()
    before = weights(model)
    with pytest.raises(ste.errors.ParameterError, match=r"selected none of the \d+ layer\(s\).*Dense.*Fix"):
        TRANSFORMS[name](model, filters=filters)
    for old, now in zip(before, weights(model)):
        np.testing.assert_array_equal(old, now)


class Matrix(L.Layer):
    """A layer with a weight no transformation knows."""

    def build(self, input_shape: Any) -> None:
        self.matrix = self.add_weight(shape=(input_shape[-1], input_shape[-1]), initializer="identity")

    def call(self, x: Any) -> Any:
        return x @ self.matrix


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_what_stays_float_is_named_in_one_warning_and_strict_raises_before_anything_is_built(name) -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, L.Dense(2, name="head")(Matrix(name="mix")(inputs)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TRANSFORMS[name](model)
    messages = [str(w.message) for w in caught if "not covered" in str(w.message)]
    assert len(messages) == 1 and "mix (Matrix)" in messages[0] and "16 values" in messages[0]
    share = 16 / sum(kernels(model).values())  # the rank >= 2 values numpy counts: 16 + 4·2
    assert f"{share:.1%} of the model's" in messages[0]
    uids = keras.backend.get_uid("dense")
    with pytest.raises(ste.errors.UnsupportedLayerError, match=r"strict=True.*mix \(Matrix\)"):
        TRANSFORMS[name](model, strict=True)
    assert keras.backend.get_uid("dense") == uids + 1  # nothing was built: no layer made in between


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_compiled_model_gives_an_uncompiled_result_with_the_original_untouched(name) -> None:
    """As TFMOT's: the result has new variables and structure, so it is compiled again."""
    model = with_composite()
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    model.fit(np.ones((4, 5), np.float32), np.ones((4, 2), np.float32), verbose=0)
    result = TRANSFORMS[name](model)
    assert not result.compiled and getattr(result, "optimizer", None) is None
    assert model.compiled and int(model.optimizer.iterations.numpy()) == 1


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_unreachable_weights_and_unbuilt_models_are_refused_naming_the_fix(name) -> None:
    class Untracked(L.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.scale = tf.Variable(tf.ones((3, 3)))  # a TensorFlow variable: Keras does not track it

        def call(self, x: Any) -> Any:
            return x @ self.scale

    model = keras.Sequential([keras.Input((3,)), L.Dense(3), Untracked(name="untracked")])
    with pytest.raises(ste.errors.UnsupportedLayerError, match=r"'untracked'.*tf.Variable.*add_weight"):
        TRANSFORMS[name](model)
    with pytest.raises(ste.errors.NotBuiltError, match="not built.*Fix"):
        TRANSFORMS[name](Subclassed())
    with pytest.raises(ste.errors.ParameterError):
        TRANSFORMS[name]("model")


class MadeInCall(L.Layer):
    """A layer that makes its weight with tf.Variable on its first call: Keras does not track it."""

    def call(self, x: Any) -> Any:
        if not hasattr(self, "scale"):
            self.scale = tf.Variable(tf.ones((x.shape[-1], x.shape[-1])), name="scale")
        return x @ self.scale


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_variable_made_in_call_is_refused_naming_add_weight(name) -> None:
    layer = MadeInCall(name="made_in_call")
    layer(np.ones((1, 3), np.float32))  # eager: the variable exists now, untracked
    model = keras.Sequential([keras.Input((3,)), L.Dense(3), layer])
    before = weights(model)
    with pytest.raises(ste.errors.UnsupportedLayerError, match=r"'made_in_call'.*tf.Variable.*Fix: .*add_weight"):
        TRANSFORMS[name](model)
    for value, after in zip(before, weights(model)):
        np.testing.assert_array_equal(value, after)


#: For each transformation, a setting that one layer of the model cannot take, and what the error names.
CANNOT_TAKE: dict[str, tuple[Callable[[keras.Model], Any], str]] = {
    "qat": (lambda model: ste.quantize_model(model, scheme="binary"), r"'table'.*binary scheme cannot take.*Fix:"),
    "prune": (
        lambda model: S.prune_low_magnitude(model, sparsity_m_by_n=(2, 4)),
        r"'table'.*sparsity_m_by_n needs an input-channel axis.*Fix:",
    ),
    "cluster": (
        lambda model: C.cluster_weights(model, 100),
        r"number_of_clusters=100 is more than the 40 values.*'table'.*Fix:",
    ),
}


@pytest.mark.parametrize("name", sorted(CANNOT_TAKE))
def test_a_setting_a_layer_cannot_take_is_refused_before_anything_is_built(name) -> None:
    inputs = keras.Input((3,), dtype="int32")
    x = L.Embedding(10, 4, name="table")(inputs)
    model = keras.Model(inputs, L.Dense(4, name="head")(L.Flatten()(x)))
    transform, message = CANNOT_TAKE[name]
    uids = keras.backend.get_uid("dense")
    with pytest.raises(ste.STEError, match=message):
        transform(model)
    assert keras.backend.get_uid("dense") == uids + 1  # raised before any layer was made (get_uid counts itself)
