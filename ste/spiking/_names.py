"""Neuron names: ``ste.spiking.register_neuron(name)(Cell)`` and the built-in neurons under their names.

``SpikingDense(units, neuron="lif")`` (and the other synapse layers) build the named cell with its defaults. The
table is a :class:`ste._common._names.NameTable`, as the surrogate
registry's: a name is a Python identifier that is not a keyword (integrate-and-fire is ``"if_"``), replacing one
needs ``replace=True``, and an unknown name gets did-you-mean suggestions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._common._abstract import check_complete
from .._common._names import NameTable
from .._keras._lookup import publish_serializable
from ..errors import ParameterError, RegistrationError
from ._alif import ALIFCell
from ._cell import NIR_FORMS, SpikingCell
from ._if import IFCell
from ._li import LICell
from ._lif import LIFCell
from ._recurrent import RLIFCell, RSynapticCell
from ._synaptic import SynapticCell

__all__ = ["NEURONS", "neurons", "register_neuron", "unregister_neuron"]

C = TypeVar("C", bound=type[SpikingCell])

NEURONS: NameTable[type[SpikingCell]] = NameTable(
    "neuron",
    ParameterError,
    " Fix: pass a registered name, a ste.spiking cell instance, or register the cell.",
    on_change=publish_serializable("ste.neuron"),  # a registered cell is registered with Keras too: its model loads
)


def _check_cell(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, SpikingCell)):
        raise RegistrationError(
            f"cannot register the neuron {name!r}: expected a ste.spiking.SpikingCell subclass; received "
            f"{type(cls).__name__} {cls!r}. Fix: register the cell class (class MyCell(ste.spiking.LeakyCell))."
        )
    check_complete(cls, f"cannot register the neuron {name!r}")
    form = vars(cls).get("nir_form")
    if form is not None and form not in NIR_FORMS:
        raise RegistrationError(
            f"cannot register the neuron {name!r}: {cls.__qualname__} declares nir_form = {form!r}, which is not a "
            f"NIR form ste exports; known forms: {', '.join(NIR_FORMS)}. Fix: declare one of them if its step "
            f"computes that node, or nir_form = None (no NIR export)."
        )


def register_neuron(name: str, *, replace: bool = False) -> Callable[[C], C]:
    """A class decorator registering a spiking cell under ``name`` (``SpikingDense(units, neuron=name)``).

    Args:
        name: a Python identifier that is not a keyword.
        replace: overwrite an existing name (a built-in included); otherwise
            :class:`ste.errors.RegistrationError`.
    """
    return NEURONS.decorator(name, replace=replace, check=_check_cell, owner=f"ste.spiking.register_neuron({name!r})")


def unregister_neuron(name: str) -> type[SpikingCell]:
    """Remove the neuron ``name`` and return its cell class.

    Args:
        name: a registered neuron name.
    """
    return NEURONS.unregister(name)


def neurons() -> list[str]:
    """The registered neuron names, sorted."""
    return NEURONS.names()


for _name, _cls in (
    ("lif", LIFCell),
    ("if_", IFCell),
    ("alif", ALIFCell),
    ("li", LICell),
    ("synaptic", SynapticCell),
    ("rlif", RLIFCell),
    ("rsynaptic", RSynapticCell),
):
    NEURONS.register(_name, _cls)
