"""Spiking neural networks: neurons trained with the registry's surrogate gradients, encoders, readouts, a loss.

>>> import keras, ste
>>> model = keras.Sequential([keras.Input((25, 64)), keras.layers.Dense(100), ste.spiking.LIF(beta=0.9),
...                           keras.layers.Dense(10), ste.spiking.LIF(beta=0.9)])
"""

from ._alif import ALIF, ALIFCell
from ._cell import SpikingCell
from ._constraint import Interval
from ._if import IF, IFCell
from ._layer import SpikingRNN
from ._lif import LIF, LIFCell
from ._spike import heaviside

__all__ = [
    "ALIF",
    "ALIFCell",
    "IF",
    "IFCell",
    "Interval",
    "LIF",
    "LIFCell",
    "SpikingCell",
    "SpikingRNN",
    "heaviside",
]
