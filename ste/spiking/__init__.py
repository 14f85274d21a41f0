"""Spiking neural networks: neurons trained with the registry's surrogate gradients, encoders, readouts, a loss.

>>> import keras, ste
>>> model = keras.Sequential([keras.Input((25, 64)), keras.layers.Dense(100), ste.spiking.LIF(beta=0.9),
...                           keras.layers.Dense(10), ste.spiking.LIF(beta=0.9)])
"""

from ._alif import ALIF, ALIFCell
from ._cell import SpikingCell
from ._constraint import Interval
from ._conv import SpikingConv2D
from ._dense import SpikingDense
from ._encoders import delta_encode, latency_encode, rate_encode
from ._fused._fuse import fuse
from ._fused._layers import Fused
from ._if import IF, IFCell
from ._layer import SpikingRNN
from ._leaky import LeakyCell
from ._li import LI, LICell
from ._lif import LIF, LIFCell
from ._loss import RateCrossEntropy, rate_cross_entropy
from ._names import neurons, register_neuron, unregister_neuron
from ._nir import from_nir, to_nir
from ._plot import plot_membrane, plot_raster
from ._readouts import Readout, last_membrane, max_membrane, spike_count, spike_rate
from ._recurrent import RLIF, RLIFCell, RSynaptic, RSynapticCell
from ._spike import heaviside
from ._synaptic import Synaptic, SynapticCell
from ._time import TimeDistributed

__all__ = [
    "ALIF",
    "IF",
    "LI",
    "LIF",
    "RLIF",
    "ALIFCell",
    "Fused",
    "IFCell",
    "Interval",
    "LICell",
    "LIFCell",
    "LeakyCell",
    "RLIFCell",
    "RSynaptic",
    "RSynapticCell",
    "RateCrossEntropy",
    "Readout",
    "SpikingCell",
    "SpikingConv2D",
    "SpikingDense",
    "SpikingRNN",
    "Synaptic",
    "SynapticCell",
    "TimeDistributed",
    "delta_encode",
    "from_nir",
    "fuse",
    "heaviside",
    "last_membrane",
    "latency_encode",
    "max_membrane",
    "neurons",
    "plot_membrane",
    "plot_raster",
    "rate_cross_entropy",
    "rate_encode",
    "register_neuron",
    "spike_count",
    "spike_rate",
    "to_nir",
    "unregister_neuron",
]
