"""The tools around the library: what a person runs to look at ops, surrogates and models, or to ship them.

* ``_cli``: the command line, ``python -m ste`` (``list``, ``show``, ``check``, ``plot``); answers ``--help`` before
  TensorFlow is imported;
* ``_plot``, ``_catalog``, ``_targets``: ``ste.plot`` of an op, a surrogate or a quantizer, and the facts about each
  registry entry shared with the documentation's gallery;
* ``_gradcheck``: ``ste.testing.check_gradient`` against finite differences;
* ``_summary``: ``ste.summary`` of a model (memory, bits, operations per layer);
* ``_export``, ``_packing``: ``ste.export_quantized_weights`` and its bit-packed form.

Tools use everything below them (the op machinery, the families); nothing below imports a tool.
"""
