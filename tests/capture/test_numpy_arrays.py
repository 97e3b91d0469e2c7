"""Issue 31: more of numpy on tensors recorded as torch operations
(magpy.capture.callees.numpy_arrays' tables).

``np.asarray``/``np.array``, ndarray ``copy``/``reshape``/``transpose``/``all``/``any``/
``argmax``/``clip``/``flatten``/``std``, ``np.linalg.norm``, ``np.fft``, ``np.clip``,
``np.matmul``, ``np.std`` (numpy's ``ddof=0``), ``np.round`` (half to even in both), ``np.meshgrid``,
``astype`` ...: each
program is one graph where torch gives numpy's dtype and shape (checked by
magpy.capture.callees.numpy_arrays, not
assumed), against eager on the first, repeated and fresh calls.  Values are torch's kernels',
within rounding of numpy's, so results compare with allclose (``_graph_as_is``).
"""
import numpy as np
import pytest
import torch

import magpy
from tests.harness.compile_harness import check_compiled, fresh, standard


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


def _graph_as_is(gm, example_inputs):
    """The fx graph as it is (the harness then compares with allclose)."""
    return gm.forward


def _views_and_copies(x):
    a = np.asarray(x.numpy())
    b = a.reshape(4, 3).transpose().copy()
    c = np.transpose(a.reshape((2, 6)), (1, 0)).flatten()
    return torch.from_numpy(np.array(b) * 2) + torch.from_numpy(c).sum()


def _statistics(x):
    a = x.numpy()
    spread = torch.tensor(np.std(a, axis=0)) + torch.tensor(a.var())
    return spread * torch.as_tensor(np.linalg.norm(a)), torch.tensor(a.argmax(1)), torch.tensor(np.argmin(a))


def _rounding_and_clipping(x):
    a = x.numpy() * 3
    return torch.from_numpy(np.clip(np.round(a), -2.0, 2.0) + np.floor(a) - np.ceil(a).clip(0, 1)
                            + np.sign(a) * np.log1p(np.abs(a)) + np.expm1(a / 10))


def _truths(x):
    a = x.numpy()
    return torch.tensor(np.abs(a).all()), torch.tensor(a.any(1)), torch.tensor(np.all(a + 5, axis=0))


def _spectrum(x):
    a = x.numpy()
    return torch.from_numpy(np.abs(np.fft.rfft(a))), torch.from_numpy(np.fft.fft(a).real)


def _products(x):
    a = x.numpy()
    return torch.from_numpy(np.matmul(a, a.T) / np.power(np.abs(a) + 1, 2).sum())


def _casts(x):
    a = x.numpy().astype(np.float64)   # (a numpy dtype as an argument)
    return torch.from_numpy(a * 2), torch.from_numpy(np.abs(a).astype("float32").sum(0))


def _grids(x):
    a = x.numpy()
    g1, g2 = np.meshgrid(a.sum(0), a.mean(1))
    return torch.from_numpy(g1 * 2 - g2), torch.from_numpy(g2)


PROGRAMS = [_views_and_copies, _statistics, _rounding_and_clipping, _truths, _spectrum, _products, _casts,
            _grids]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__.lstrip("_"))
def test_numpy_on_tensors_is_one_graph(program):
    args = lambda s: (torch.randn(3, 4),)   # noqa: E731
    check_compiled(lambda: (program, None), standard(args) + [fresh(args, seed=5)], backend=_graph_as_is,
                   expect_graphs=1, expect_records=1)


def test_numpy_on_tensors_under_inductor():
    args = lambda s: (torch.randn(3, 4),)   # noqa: E731
    check_compiled(lambda: (_statistics, None), standard(args), backend="inductor", expect_graphs=1)
