"""The ground floor of ste: what every other part uses and that uses nothing of ste but :mod:`ste.errors`.

* ``_arguments``: checking arguments (numbers, and switches that must be real bools);
* ``_names``: the name → entry tables behind the surrogate registry, the quantizer names and the constraint names;
* ``_matplotlib``: matplotlib, imported when a plot is drawn (ste.plot and the spiking plots share it);
* ``_origin``: whether a class is one of ste's own (pruning and clustering cover ste's subclasses of Keras layers).

Layers, from the bottom: ``ste.errors`` < ``ste._common`` < ``ste.registry`` < ``ste._core`` < ``ste._keras`` < the
families (``ste.quantizers``, ``ste.layers``, ``ste.qat``, ``ste.spiking``, ...) < the tools (``ste._tools``,
``ste.testing``) < the compatibility views (``ste.larq``). No module imports one of a higher layer
(``tests/test_layering.py`` checks it).
"""
