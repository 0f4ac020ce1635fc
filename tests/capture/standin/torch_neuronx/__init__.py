"""A stand-in for TorchNeuron (``torch_neuronx``), for tests on machines without Trainium.

Synthetic: it implements only the documented surface neurontrace's capture uses, and
records how it was used so that tests can assert the documented configuration. It
registers a ``neuron`` device module that reports two devices, and a ``neuron``
``torch.compile`` backend that runs the graph eagerly. Tensors stay on the CPU (the test
points the capture's device type at ``cpu``).
"""

from __future__ import annotations

import os
import types

import torch

#: Environment the process had when TorchNeuron was imported (compile-time settings).
ENV_AT_IMPORT = {k: os.environ.get(k) for k in
                 ("TORCH_NEURONX_NEFF_CACHE_DIR", "XLA_IR_DEBUG", "XLA_HLO_DEBUG")}
#: One entry per synchronize(): whether the torch profiler was recording at the time.
SYNCHRONIZED: list[bool] = []

torch.neuron = types.SimpleNamespace(device_count=lambda: 2)  # type: ignore[attr-defined]


def synchronize() -> None:
    SYNCHRONIZED.append(torch.autograd._profiler_enabled())


@torch._dynamo.register_backend(name="neuron")
def _neuron_backend(gm, example_inputs):  # type: ignore[no-untyped-def]
    return gm.forward
