"""Synapses and spiking neurons over time as one loop, under one custom gradient: one concept, four modules.

* ``_loop``: ``fused_stack``, the loop itself and its backward pass (recomputed states, checkpointed segments);
* ``_synapses``: a stage's synapse (dense, convolutional) and its vector-Jacobian products, written out;
* ``_layers``: ``SynapseLayer`` (what ``SpikingDense`` and ``SpikingConv2D`` share) and ``Fused``, the Keras layers;
* ``_fuse``: ``ste.spiking.fuse(model)``, a Sequential model's ``Dense`` → neuron-layer pairs as fused layers.
"""
