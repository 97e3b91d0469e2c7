"""Issues 31 and 42: numpy on tensors recorded as torch operations
(magpy.capture.callees.numpy_arrays, its equivalents from torch._numpy).

``np.asarray``/``np.array``, ndarray ``copy``/``reshape``/``transpose``/``all``/``any``/
``argmax``/``clip``/``flatten``/``std``, ``np.linalg.norm``, ``np.fft``, ``np.clip``,
``np.matmul``, ``np.std`` (numpy's ``ddof=0``), ``np.round`` (half to even in both), ``np.meshgrid``,
``astype`` ...: each
program is one graph where torch gives numpy's dtype and shape (checked by
magpy.capture.callees.numpy_arrays, not
assumed), against eager on the first, repeated and fresh calls.  Values are torch's kernels',
within rounding of numpy's, so results compare with allclose (``graph_as_is``).
"""
import warnings

import numpy as np
import pytest
import torch

import magpy
from tests.harness.compile_harness import again, check_compiled, first, fresh, graph_as_is, standard


@pytest.fixture(autouse=True)
def _no_records():
    magpy.reset()


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


# ---------------------------------------------------------------------------- issue 42
# numpy's whole API through torch._numpy: functions found by name (none listed by magpy),
# operators and comparisons, indexing and slicing, lists of arrays, numpy given tensors
# themselves (Tensor.__array__ / __array_wrap__ inside numpy).

def _ufuncs_on_tensors(x):
    return np.sin(x) + np.exp(x) * 2, np.maximum(x, 0.5), np.greater(x, 0)   # (bools come back as uint8)


def _functions_on_tensors(x):
    a = np.asarray(x)
    return torch.from_numpy(np.concatenate([a, np.tanh(x.numpy())], axis=0) @ a.T)


def _operators_and_comparisons(x):
    a = x.numpy()
    b = np.where(a > 0, a, 0.1 * a) // 0.25 + (a % 0.5) - (-a) ** 2
    return torch.from_numpy(b), torch.from_numpy((a >= 0) & ~(a < -1) | (a == a))


def _indexing(x):
    a = x.numpy()
    rows = a[1:, ::2] - a.mean(axis=0)[::2]
    return torch.from_numpy(rows * a[0, 1] + a[..., None][:, 2, 0].sum()), torch.tensor(a[-1])


def _lists_of_arrays(x):
    a = x.numpy()
    parts = [a, a * 2, np.abs(a)]
    return torch.tensor(np.stack(parts).astype(np.float32)), torch.from_numpy(np.vstack((a, a[::-1])))


def _more_functions(x):
    a = x.numpy()
    return (torch.from_numpy(np.cumsum(a, axis=1)), torch.from_numpy(np.tile(a, (2, 1))),
            torch.from_numpy(np.einsum("ij,kj->ik", a, a)),
            torch.from_numpy(np.flip(np.sort(a, axis=1), 0).copy()),
            torch.from_numpy(np.clip(a, -1, 1).swapaxes(0, 1)), torch.from_numpy(abs(a)))


NUMPY_API = [_ufuncs_on_tensors, _functions_on_tensors, _operators_and_comparisons, _indexing,
             _lists_of_arrays, _more_functions]


@pytest.mark.parametrize("program", PROGRAMS + NUMPY_API, ids=lambda f: f.__name__.lstrip("_"))
def test_numpy_on_tensors_is_one_graph(program):
    args = lambda s: (torch.randn(3, 4),)   # noqa: E731
    check_compiled(lambda: (program, None), standard(args) + [fresh(args, seed=5)], backend=graph_as_is,
                   expect_graphs=1, expect_records=1)


@pytest.mark.parametrize("program", [_statistics, _operators_and_comparisons],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_numpy_on_tensors_under_inductor(program):
    args = lambda s: (torch.randn(3, 4),)   # noqa: E731
    check_compiled(lambda: (program, None), standard(args), backend="inductor", expect_graphs=1)


# Where torch has no equivalent that gives what numpy gives, or numpy's value leaves what a
# graph can compute, the call is correct in pieces: each escapes the first recording, and
# the next one makes that .numpy() (or numpy call) a break.

def _integer_division(x):
    a = (x * 10).to(torch.int64).numpy()
    return torch.from_numpy(a / 4)   # (float64 in numpy; torch._numpy's is float32)


def _masked(x):
    a = x.numpy()
    return torch.from_numpy(a[a > 0].copy())   # (a size that follows the data)


def _returned(x):
    return np.sum(x.numpy(), axis=1)


def _read_as_float(x):
    a = x.numpy()
    return x / float(np.linalg.norm(a))


def _updated_in_place(x):
    a = x.numpy()
    a += 1   # (writes x's memory: eager's x changes too)
    return torch.from_numpy(a * 2)


def _eager_array_made_a_tensor(x):
    a = x.numpy()
    total = float(a.sum())   # (escapes: from the next recording on, the numpy is eager steps)
    return torch.tensor(np.stack([a, a * 2]).astype(np.float32)) * total


@pytest.mark.parametrize("program", [_integer_division, _masked, _returned, _read_as_float, _updated_in_place,
                                     _eager_array_made_a_tensor], ids=lambda f: f.__name__.lstrip("_"))
def test_numpy_without_an_equivalent_runs_in_pieces(program):
    args = lambda s: (torch.randn(3, 4),)   # noqa: E731
    # (an array an eager step computed, made a tensor, is a constant the mock checks: new
    # values record again)
    steps = [first(args, expect=None), again(expect=None), again(), fresh(args, expect=None), again()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", magpy.CaptureFailedWarning)   # (a mock that failed once)
        trace = check_compiled(lambda: (program, None), steps, fullgraph=False)
    assert magpy.stats(trace.compiled).eager_runs == 0
