"""A compiled module looks like the module it wraps to the libraries that inspect it.

transformers' Trainer reads ``inspect.signature(model.forward)`` to keep the dataset columns
the model takes (``remove_unused_columns``, on by default) and ``type(model).forward`` for the
label names, saves with ``save_pretrained`` where the model is a ``PreTrainedModel``, and
accelerate's ``unwrap_model`` looks for wrappers.  Each is checked against the same program
run eagerly.
"""
from __future__ import annotations

import inspect
import os
import tempfile

import pytest
import torch
from torch import nn

import magpy
from tests.harness.compile_harness import check_compiled, first, fresh

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


class Masked(nn.Module):
    """forward with a default and a keyword-only parameter."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None, *, scale: float = 1.0):
        """Masked linear."""
        y = self.lin(x) * scale
        return y if mask is None else y * mask

    def double(self, x):
        return 2 * self(x)


def test_forward_has_the_original_signature_name_and_doc():
    m = Masked()
    c = magpy.compile(m, backend="eager")
    assert inspect.signature(c.forward) == inspect.signature(m.forward)
    assert inspect.signature(type(c).forward) == inspect.signature(Masked.forward)
    assert c.forward.__name__ == "forward" and c.forward.__doc__ == "Masked linear."
    assert isinstance(c, magpy.CompiledModule) and isinstance(c, Masked)
    assert list(c.state_dict()) == list(m.state_dict())


def test_forward_and_original_methods_run_compiled():
    def build():
        torch.manual_seed(0)
        m = Masked()
        return m, m

    x = lambda s: (torch.randn(3, 4),)   # noqa: E731
    check_compiled(build, [first(x), fresh(x)])
    m = Masked()
    c = magpy.compile(m, backend="eager")
    x = torch.randn(3, 4)
    torch.testing.assert_close(c.forward(x), m(x))
    # A method of the original's class runs on the compiled module: its self(...) is compiled.
    torch.testing.assert_close(c.double(x), m.double(x))
    assert (magpy.stats(c).monitor_runs, magpy.stats(c).mock_runs) == (1, 1)
    torch.testing.assert_close(c.forward(x, scale=2.0), m(x, scale=2.0))
    assert (magpy.stats(c).monitor_runs, magpy.stats(c).mock_runs) == (2, 1)


def test_a_module_whose_class_cannot_be_a_base_still_compiles():
    class Slotted(nn.Linear):
        __slots__ = ("extra",)

    m = Slotted(4, 4)
    c = magpy.compile(m, backend="eager")
    assert isinstance(c, magpy.CompiledModule)
    x = torch.randn(2, 4)
    torch.testing.assert_close(c(x), m(x))
    assert inspect.signature(c.forward) == inspect.signature(m.forward)


class _Rows(torch.utils.data.Dataset):
    """Token rows with labels and a column the model does not take (dropped by the Trainer)."""

    def __init__(self, n: int = 32, length: int = 12):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (n, length), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]),
                "labels": self.labels[i], "source": "synthetic"}


def _bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    return transformers.BertForSequenceClassification(config)


def _train(model, out: str) -> tuple[list[float], dict]:
    """Two epochs of the Trainer with its default arguments (on the CPU), then a save."""
    args = transformers.TrainingArguments(output_dir=out, num_train_epochs=2, per_device_train_batch_size=8,
                                          report_to=[], seed=0, logging_steps=1, save_strategy="no",
                                          use_cpu=True, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Rows())
    trainer.train()
    trainer.save_model(os.path.join(out, "saved"))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_trainer_with_default_arguments_trains_a_compiled_model_as_eager():
    from accelerate.utils import extract_model_from_parallel

    with tempfile.TemporaryDirectory() as eager_dir, tempfile.TemporaryDirectory() as magpy_dir:
        eager_losses, eager_state = _train(_bert(), eager_dir)
        model = magpy.compile(_bert(), backend="eager")
        losses, state = _train(model, magpy_dir)
        assert len(losses) == 8 and losses == eager_losses
        assert state.keys() == eager_state.keys()
        assert all(torch.equal(state[k], eager_state[k]) for k in state)
        stats = magpy.stats(model)
        assert stats.mock_runs >= 6 and stats.eager_runs == 0
        assert sorted(os.listdir(os.path.join(magpy_dir, "saved"))) == \
            sorted(os.listdir(os.path.join(eager_dir, "saved")))
        loaded = transformers.BertForSequenceClassification.from_pretrained(os.path.join(magpy_dir, "saved"))
        assert all(torch.equal(loaded.state_dict()[k], state[k]) for k in state)
    assert extract_model_from_parallel(model) is model
