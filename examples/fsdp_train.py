"""An FSDP2 (``fully_shard``) train step compiled by magpy, on CPU with gloo.

    torchrun --nproc-per-node 2 examples/fsdp_train.py [--backend eager|inductor] [--steps 6]

Each rank trains a small MLP, sharded with ``fully_shard`` on each Linear and on the root,
on its own data twice, from the same initial weights: with an eager train step, and with the
same step compiled by magpy (``magpy.compile(train_step)``: ``zero_grad``, the forward, the
loss, ``loss.backward()`` and ``opt.step()``).  FSDP's hooks (all-gather and parameter swap,
reshard) run as eager steps between the compiled graphs, ``loss.backward()`` runs the real
autograd engine (FSDP's reduce-scatters run in its hooks), the optimizer update is a graph.
It prints each rank's losses and what each compiled call was, whether the compiled model's
parameter shards match eager FSDP's (bit-exact with backend "eager", allclose with
"inductor"), and ``magpy.stats``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

import magpy


def make_step(backend: str | None):
    """A sharded model, its optimizer and a train step; the step compiled by magpy with
    ``backend`` (None: eager)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)

    def train_step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, (train_step if backend is None else magpy.compile(train_step, backend=backend))


def call_kind(before, after) -> str:
    """What a compiled call was, from its magpy.stats."""
    if after.eager_runs > before.eager_runs:
        return "eager run"
    if after.mock_runs > before.mock_runs:
        return f"mock run ({after.graphs_per_call} graphs)"
    return "recording" if after.records > before.records else "continuation (recorded the rest)"


def shards(model) -> torch.Tensor:
    """This rank's shards of the parameters, flat."""
    return torch.cat([p.to_local().detach().flatten() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--steps", type=int, default=6)
    opts = parser.parse_args()

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")   # loopback: the ranks are on this machine
    warnings.simplefilter("ignore", magpy.GraphBreakWarning)   # the eager steps are listed below
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    same = torch.equal if opts.backend == "eager" else (lambda a, b: torch.allclose(a, b, 1e-4, 1e-5))

    eager_model, eager_step = make_step(None)
    model, step = make_step(opts.backend)
    data = torch.Generator().manual_seed(rank)   # each rank its own batches
    lines = []
    for i in range(opts.steps):
        x, y = torch.randn(16, 32, generator=data), torch.randn(16, 8, generator=data)
        want = eager_step(x, y)
        before = dataclasses.replace(magpy.stats(step))   # (a snapshot: the stats are live)
        got = step(x, y)
        lines.append(f"rank {rank} step {i + 1}: loss {got.item():.6f}, eager FSDP's {want.item():.6f} "
                     f"(same: {same(got, want)})  {call_kind(before, magpy.stats(step))}")

    match = same(shards(model), shards(eager_model))
    lines.append(f"rank {rank}: parameter shards match eager FSDP: {match}")
    st = magpy.stats(step)
    lines.append(f"rank {rank}: monitor_runs={st.monitor_runs} mock_runs={st.mock_runs} "
                 f"eager_runs={st.eager_runs} records={st.records} graph_count={st.graph_count} "
                 f"graphs_per_call={st.graphs_per_call}")

    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, lines)
    if rank == 0:
        print("\n".join(line for rank_lines in every for line in rank_lines))
        print("eager steps between the graphs (reason: times recorded):")
        print("\n".join(f"  {reason}: {n}" for reason, n in st.breaks.items()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
