"""Make the benchmark trace: a CPU profile of a small transformer training loop.

As described in the landscape notes: ~100 steps of an ``nn.TransformerEncoder`` training
loop profiled with record_shapes, profile_memory and with_stack; about 3 MB of JSON per
step. Needs torch (``pip install torch==2.13.0``). Takes about a minute per 300 MB.

    python bench/make_trace.py bench/data/trace_300mb.json --steps 100
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()

    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    torch.set_num_threads(2)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=a.layers, enable_nested_tensor=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64)

    def step() -> None:
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        for _ in range(a.steps):
            step()
            prof.step()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    prof.export_chrome_trace(a.out)
    print(f"{a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
