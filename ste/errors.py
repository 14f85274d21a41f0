"""The error hierarchy of ``ste``: every error the library raises derives from :class:`STEError`.

Each concrete class also derives from the built-in that fits (``TypeError`` or ``ValueError``), so code that
already catches those keeps working.

Every class sets ``__init__ = Exception.__init__``. AutoGraph re-raises an exception that escapes while a
``tf.function`` is being traced; it keeps the exception's type only when the class's ``__init__`` *is*
``Exception.__init__`` (a class inheriting ``ValueError.__init__`` is turned into a ``StagingError``). Keeping the
plain initialiser means ``except ste.STEError`` works the same inside and outside ``tf.function``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = [
    "BackupError",
    "CallError",
    "ConversionError",
    "GradientCountError",
    "GradientDtypeError",
    "GradientShapeError",
    "HigherOrderError",
    "InputError",
    "MissingBackwardError",
    "MissingCallbackError",
    "MissingDependencyError",
    "MissingMethodError",
    "NotBuiltError",
    "ParameterError",
    "ParameterTypeError",
    "PruningTargetError",
    "RegistrationError",
    "RuleError",
    "STEError",
    "SerializationError",
    "SpecError",
    "UnknownConstraintError",
    "UnknownQuantizerError",
    "UnknownSurrogateError",
    "UnsupportedLayerError",
    "VariableAssignmentError",
]


class STEError(Exception):
    """Base class of every error raised by ``ste``."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class HigherOrderError(STEError, ValueError):
    """A gradient of a gradient (second or higher order) through an op whose backward pass keeps a bit-packed
    copy of its input instead of the input itself (``ste.bit_masks``): that gradient would miss the path through
    the input. With ``ste.bit_masks(False)`` the op keeps its input and higher orders are exact."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class InputError(STEError, TypeError):
    """A positional input of an ``ste`` op is not a floating-point tensor (or cannot become one)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class CallError(STEError, TypeError):
    """An ``ste`` op was called with arguments its forward function (or rule) cannot take."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class MissingBackwardError(STEError, TypeError):
    """A :class:`ste.Forward` was called before a backward rule was attached to it."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class RuleError(STEError, TypeError):
    """A backward rule cannot be used as given (wrong kind of object, wrong arity, wrong return type)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class GradientCountError(STEError, ValueError):
    """A backward rule returned a different number of gradients than the op has positional inputs."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class GradientShapeError(STEError, ValueError):
    """A backward rule returned a gradient whose shape differs from its input's shape."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class GradientDtypeError(STEError, TypeError):
    """A backward rule returned a gradient whose dtype differs from its input's dtype."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class SpecError(STEError, ValueError):
    """A surrogate spec string such as ``"sigmoid_surrogate(beta=4)"`` is malformed or not made of literals."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class UnknownSurrogateError(STEError, ValueError):
    """No surrogate is registered under the requested name."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class UnknownQuantizerError(STEError, ValueError):
    """No quantizer is known under the requested name (see ``ste.quantizers.names()``)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class UnknownConstraintError(STEError, ValueError):
    """No constraint is known under the requested name (see ``ste.constraints.names()``)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class NotBuiltError(STEError, ValueError):
    """A Keras layer or model must be built (called on data, or given an ``Input``) before this operation."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class ParameterError(STEError, ValueError):
    """A hyperparameter of a surrogate or quantizer is unknown, of the wrong type or out of range."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class ParameterTypeError(ParameterError, TypeError):
    """An argument has the wrong type where larq (or Python) raises ``TypeError``: both ``except TypeError`` and
    ``except ste.errors.ParameterError`` catch it."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class RegistrationError(STEError, ValueError):
    """A surrogate could not be registered (name taken, invalid name, invalid definition)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class ConversionError(STEError, ValueError):
    """A model or a NIR graph cannot be converted exactly (:func:`ste.spiking.to_nir`, :func:`ste.spiking.from_nir`):
    the message names the layer or node, why it has no exact counterpart, and the fix."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class MissingMethodError(STEError, TypeError):
    """A subclass of an ste extension point (``Surrogate``, ``Scheme``, ``SpikingCell``, ``PruningSchedule``, ...)
    is instantiated without one of its base's abstract methods; the message names each method and the fix."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class MissingDependencyError(STEError, ImportError, ValueError):
    """A dependency is not installed or too old: TensorFlow at ``import ste`` (``pip install 'ste[tensorflow]'``, or
    the extra of the build in use), or an optional one (e.g. matplotlib for :func:`ste.plot`: ``pip install
    'ste[plot]'``).

    An ``ImportError`` (what code that probes for optional packages catches) and, like every ``ste`` error, a
    ``TypeError`` or ``ValueError``.
    """

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class SerializationError(STEError, TypeError):
    """An ``ste`` op cannot be saved, copied or pickled as built (e.g. its forward function is a lambda).

    Raised when saving (``model.save``, ``get_config``, ``pickle``), never when loading: the message names the op,
    the part that has no importable name, and the fixes.
    """

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class UnsupportedLayerError(STEError, ValueError):
    """A layer that cannot be used as asked: a larq layer that Keras 3 cannot host (``QuantLocallyConnected1D`` /
    ``2D``: Keras 3 has no ``LocallyConnected`` layers; deliberately not an ``AttributeError``, so that
    ``from ste.layers import ...`` shows this message too), or a layer :func:`ste.quantize_model` cannot quantize
    (``strict=True``) or copy."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class BackupError(STEError, ValueError):
    """A backup that :class:`ste.callbacks.BackupAndRestore` would resume from cannot be read (a damaged weights
    file, broken metadata, an epoch that is not a count) or does not fit the model. Raised when training starts,
    before any weight changes: the message names the file and what to delete to start afresh."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class VariableAssignmentError(STEError, ValueError):
    """:class:`ste.optimizers.CaseOptimizer` cannot give every variable to exactly one optimizer (a variable claimed
    by two predicates, an optimizer that claims none, or a restored assignment that does not fit the model)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class MissingCallbackError(STEError, ValueError):
    """A pruned model was trained without the :class:`ste.sparsity.UpdatePruningStep` callback (raised while the
    training step is traced, before any variable changes)."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__


class PruningTargetError(STEError, ValueError):
    """``ste.sparsity.strip_pruning(model, strict=True)``: a pruned layer's masks hold fewer zeros than its pruning
    schedule targets (a mask update that never ran: a ``frequency`` larger than the steps trained, a schedule stopped
    before its ``end_step``, training calls without the pruning step). Raised before anything is copied."""

    if not TYPE_CHECKING:  # mypy would otherwise type every constructor call as Any
        __init__ = Exception.__init__
