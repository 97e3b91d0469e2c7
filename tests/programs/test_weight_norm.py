"""Issue 31: old-style weight reparametrisations (``torch.nn.utils.weight_norm`` and
``spectral_norm``), common in audio and GAN code (MelGAN, TCNs, DINO's head).

Their forward pre-hooks compute the weight from ``weight_g``/``weight_v`` (or by a power
iteration updating the ``weight_u``/``weight_v`` buffers in place) and assign it as a plain
attribute, ``module.weight = ...``, on every call.  torch's Python runs natively under the
recording, so the hooks' reads of the parameters went unseen (a tensor of unknown origin,
the whole call eager); they are now monitored like nn.Module code (magpy.records.record), so each
program is one graph, state and gradients equal to eager's.
"""
import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import after, check_compiled, standard

pytestmark = pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


class MelBlock(nn.Module):
    """A MelGAN-style residual block: weight-normed convolutions."""

    def __init__(self, channels=4):
        super().__init__()
        self.conv1 = nn.utils.weight_norm(nn.Conv1d(channels, channels, 3, padding=1))
        self.conv2 = nn.utils.weight_norm(nn.Conv1d(channels, channels, 1))

    def forward(self, x):
        return x + self.conv2(torch.nn.functional.leaky_relu(self.conv1(x), 0.2))


class Critic(nn.Module):
    """A GAN critic with spectral-normed layers (power iteration in training mode)."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.utils.spectral_norm(nn.Linear(6, 8))
        self.l2 = nn.utils.spectral_norm(nn.Linear(8, 1))

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def _signal(s):
    return (torch.randn(2, 4, 10),)


def _rows(s):
    return (torch.randn(3, 6),)


def _state(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _train_step(m):
    def step(x):
        loss = m(x).square().mean()
        loss.backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()   # (at the end: every call then starts with no gradients)
        return loss.detach(), grads
    return step


@pytest.mark.parametrize("make", [MelBlock, Critic])
def test_weight_reparametrisations_are_one_graph_in_inference(make):
    def build():
        m = make().eval() if make is Critic else make()
        return m, m

    data = _signal if make is MelBlock else _rows
    with torch.no_grad():
        check_compiled(build, standard(data), expect_graphs=1, expect_records=1, observe=_state)


def test_spectral_norm_power_iteration_updates_its_buffers_as_eager():
    # Training mode: each call updates weight_u/weight_v in place (the mock replays it).
    def build():
        m = Critic()
        return m, m

    with torch.no_grad():
        halved = after(lambda m: m.l1.weight_orig.data.mul_(0.5), expect=None)
        check_compiled(build, [*standard(_rows), halved],
                       expect_records=1, observe=_state)


@pytest.mark.parametrize("make", [MelBlock, Critic])
def test_weight_reparametrisations_train_with_eagers_gradients(make):
    def build():
        m = make()
        return _train_step(m), m

    data = _signal if make is MelBlock else _rows
    check_compiled(build, standard(data), expect_records=1, observe=_state, fullgraph=False)


def test_weight_norm_under_inductor():
    def build():
        m = MelBlock()
        return m, m

    with torch.no_grad():
        check_compiled(build, standard(_signal), backend="inductor", expect_graphs=1, observe=_state)
