"""NIR import and export: ``to_nir(model, dt)`` and ``from_nir(graph_or_path, dt)``.

NIR (the Neuromorphic Intermediate Representation, ``pip install 'ste[nir]'``) describes neurons in continuous time;
ste's neurons are discrete. At a step ``dt`` the two meet by Euler's rule, as snnTorch's importer does:

* LIF ``τ·dv/dt = (v_leak − v) + R·I``: ``β = 1 − dt/τ`` and the input is scaled by ``R·dt/τ``;
* IF ``dv/dt = R·I``: ``β = 1``, the input scaled by ``R·dt``;
* LI: a LIF without spikes (``reset="none"``, ``emit="membrane"``);
* a decay of exactly 1 (τ = ∞, no leak): NIR's ``I`` (``dv/dt = R·I``) for a leaky integrator, ``IF`` for a
  spiking neuron. NIR's LIF, LI and CubaLIF with τ = ∞ would take no input at all (``dt/τ = 0``), so a synaptic
  neuron with α = 1 or β = 1 is written as the subgraph of its two stages, the current (``LI`` or ``I``) feeding
  the membrane (``LIF`` or ``IF``).

NIR resets a neuron that fired to ``v_reset`` on the same step; ste's ``reset="zero"`` sets the membrane to 0 before
the next step's decay, which gives the same spikes. NIR has no reset by subtraction (ste's default) and no neuron
that never resets: those layers are refused, never approximated.

Every conversion goes through two tables: ``_EXPORTERS`` (a Keras layer class -> its NIR node) and ``_IMPORTERS``
(a NIR node class name -> the Keras layers it becomes). Nothing else looks at concrete classes.

Layout: NIR (like PyTorch) orders the features of a step channels first, ``(C, H, W)``; a model from ``from_nir``
takes ``[batch, time, H, W, C]`` (Keras's channels-last layout, the one TensorFlow's CPU convolutions have).

The modules, from the bottom: ``_graph`` (the ``nir`` package, metadata keys, dt, edges), ``_discretization``
(Euler's rule), ``_layout`` (channels first <-> channels last), ``_export_context`` / ``_import_context`` (what a
converter receives); one module per node family, ``_neuron_export``, ``_neuron_import``, ``_subgraph_import``
(recurrent and two-stage neurons), ``_synapses`` (Affine, Linear, Conv), ``_pooling``, ``_elementwise`` (Scale,
Threshold), ``_flatten``; and on top the two tables with their entry points, ``_export`` (``to_nir``) and ``_import``
(``from_nir``).
"""

from __future__ import annotations

from ._export import to_nir
from ._import import from_nir

__all__ = ["from_nir", "to_nir"]
