"""Training: steps/s of eager, torch.compile and magpy on a whole train step (issue 13).

    python -m benchmarks.train [--models resnet50,bert] [--size bench|test] [--batch 8] [--opt sgd|adamw]
                               [--variants ...] [--steps N] [--quick] [--threads N] [--json PATH]
                               [--device cuda]
    python -m benchmarks.train --ddp [--variants ...] [--steps N] [--quick] [--opt ...]
    python -m benchmarks.train --fsdp [--variants ...] [--steps N] [--quick] [--opt ...]

Each variant trains its own deep copy of one model (built once under ``torch.manual_seed(0)``)
with its own optimizer, by calling (compiled or not) the step::

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(**x), y)
        loss.backward()
        opt.step()
        return loss

Models: the zoo's (``benchmarks.models.MODELS``) at ``--size`` (default bench, the size
``benchmarks/run.py`` uses) in training mode, on batches of ``--batch`` (default 8) built here
(the builders give batch 1), :data:`BATCHES` distinct ones used in turn:

* ``resnet50``: ResNet-50 (width 64 at bench size), images ~ N(0, 1) (224x224 at bench size),
  cross-entropy against random labels over the 1000 classes.  BatchNorm in training mode:
  batch statistics, running statistics updated by every step.
* ``bert``: ``BertModel`` (6 layers, hidden 384, 6 heads at bench size) on 256 tokens whose
  last 32 are padding; token prediction: cross-entropy of the last hidden states projected
  on the (tied) word embeddings against random target tokens, padding ignored.  Dropout is
  set to 0: Inductor draws its own random numbers, so with dropout the losses of the
  Inductor variants could not be compared with eager's.
* ``bert-finetune``: the fine-tuning step of issue 30: ``BertForSequenceClassification`` built
  from a config with random weights (test size: hidden 32, 2 layers, 2 heads, vocabulary 100;
  bench size: hidden 256, 4 layers, 4 heads, vocabulary 1000) on 64 random tokens, 3 labels,
  cross-entropy of the logits; its step (:func:`scheduled_step`) also clips the gradients
  (``clip_grad_norm_``) and steps ``transformers.get_linear_schedule_with_warmup`` (3 warm-up
  steps of 100) after the optimizer: a new learning rate and epoch count every step.  magpy
  records the first step, the warm-up, and the decay (step 3: the task warms up one step
  longer, so that the decay record's compile and autopilot trial end before the timed
  steps), then every step is a mock run; ``--opt adamw`` is the fine-tuning optimizer.
* ``bert-accum``: the same classifier trained with gradient accumulation over
  :data:`ACCUM` micro-batches, as people write it (:func:`accumulation_step`): each call
  is one micro-step ``step(i, x, y)``, ``i`` the loop index (a Python int, new every call),
  the loss divided by ``ACCUM``, and ``opt.step(); opt.zero_grad(set_to_none=True)`` where
  ``(i + 1) % ACCUM == 0``.  Its rows time micro-steps (``ms/step``: the median micro-step,
  three of four of which only accumulate).  magpy records the first micro-step (no
  ``.grad``), the second (``i`` lifted), the first optimizer step (no optimizer state), the
  micro-step after it (no ``.grad`` again) and the first step with optimizer state, then
  replays one of three records (the notes' monitor runs are its records); the step record
  serves one call in ``ACCUM``, so the task warms up ``ACCUM`` times as long, for its
  compile and autopilot trial to end before the timed steps.
* ``lstm``: a language model written with a cell (:class:`LSTMLanguageModel`: an
  ``LSTMCell`` stepped over the sequence in a Python loop under autograd; test size:
  vocabulary 100, hidden 32; bench: 1000, 256), next-token cross-entropy at every step, on
  sequences of a new length every call (:data:`LSTM_LENGTHS`).  magpy makes the loop one
  ``torch.while_loop`` for every length (the first length unrolled, then one symbolic
  record) and compiles it with its backward; torch.compile compiles a graph per length.

``--opt``: ``sgd`` (the default: SGD, lr 0.01, momentum 0.9) or ``adamw`` (AdamW, lr 1e-3,
weight decay 0.01); torch's default implementation (on CPU the per-tensor for-loop).

=====================  ===============================================================================
variant                what is called
=====================  ===============================================================================
``eager``              ``step`` (always run: the reference)
``torch.compile-eager``  ``torch.compile(step, backend="eager")``
``magpy-eager``        ``magpy.compile(step, backend="eager")``
``torch.compile``      ``torch.compile(step)`` (Inductor; dynamo breaks the step at ``zero_grad()``,
                       which it never traces, and at ``backward()``)
``torch.compile+ca``   the same with compiled autograd (``torch._dynamo.config.compiled_autograd``
                       set while the variant runs; ``--ddp``: with ``optimize_ddp="python_reducer"``,
                       which compiled autograd needs): the backward pass is one more graph
``magpy``              ``magpy.compile(step)`` (Inductor; the whole step, ``backward()`` included, is one
                       graph (``magpy.training.backward``); ``--ddp``: ``backward()`` is an eager step between
                       graphs, so that DDP's reducer hooks run)
=====================  ===============================================================================

The ``-eager`` variants run the captured graphs as plain Python: what they cost over eager is
capture and dispatch.  Inductor variants compile in a fresh, empty inductor cache, as in
``benchmarks/run.py``.

Every variant runs the same steps on the same batches: step 1 and step 2, timed on their own
(both compilers record on step 1 and again on step 2, the first to find ``.grad`` and the
optimizer's state; torch.compile compiles each time, magpy compiles in the background from a
record's first reuse, step 3), ``--warmup`` untimed steps (default ``1 +
magpy.backends.autopilot.TRIAL_CALLS``: magpy's compile, waited for after the first of them, then its
autopilot trial of each graph against eager, so that the timed steps run the version it
kept), then ``--steps`` timed steps (default 10, ``--quick`` 3), one by one with
``benchmarks.device.now`` (``time.perf_counter``, after ``torch.cuda.synchronize()`` on a GPU)
and gc disabled.  ``--device cuda``: the model and batches on the GPU (not with ``--ddp``).

Columns:

* ``step 1 s``, ``step 2 s``: wall time of the first two steps (they record; torch.compile's
  also compile).
* ``total s``: wall time of all the steps, compilations included (a recording or compilation
  during the warm-up shows here).
* ``ms/step``, ``steps/s``: the median timed step, and its inverse.
* ``speedup``: eager's median / the variant's.
* ``graphs/step``: the graphs one steady step runs.  magpy: ``magpy.stats(f).graphs_per_call``.
  torch.compile: after the checks, one more step runs under ``torch.profiler``; each compiled
  frame it enters shows as a "Torch-Compiled Region: <compile id>" event, and those whose
  compile id has a non-empty graph in dynamo's compilation metrics are counted ("frames" in
  the notes counts them all).  A graph compiled through AOTAutograd includes its backward.
* ``compiled``: graphs compiled in all the steps.  magpy: ``stats.graph_count``; torch.compile:
  ``counters["stats"]["unique_graphs"]`` after ``torch._dynamo.reset()`` and
  ``counters.clear()`` (compiled autograd's graphs included), and beside it the graph breaks
  (``counters["graph_break"]``: the reasons are footnotes).
* ``recorded``: recordings in all the steps, "N in S": magpy's monitor runs (its records and
  continuations), torch.compile's traced graphs (``compiled``); per 100 steps with ``--steps``
  making S 100.
* ``kept``: magpy's autopilot decisions (``stats.kept``: graphs that kept the backend's
  version, graphs that run eagerly); "on trial" if no graph's trial was over by the end (its
  timed steps ran the compiled and the eager version in turn).
* ``correct``: the loss of every step and the ``state_dict()`` after the last (parameters and
  buffers) against the eager variant's (:func:`check`).  magpy-eager must equal eager exactly.
  The others (Inductor reorders float math; dynamo traces the optimizer its own way) must be
  ``allclose`` with rtol = atol = :data:`TOLERANCE`, tensor by tensor, or else, where training
  amplified rounding (BatchNorm over few values, Adam's normalised steps: eager's own float32
  rounding moves ResNet-50's test-size gradients by 2% against float64), be at most
  :data:`MULTIPLIER` times (3 times for tensors under 1000 elements, whose RMS is noisier) as
  far (RMS) from a float64 run of eager as eager's float32 run is: the rule of torch's own
  accuracy checks of compiled training (``torch._dynamo.utils.same``).  The float64 run (the model
  and batches in float64, the same steps) runs first, untimed, when such variants are chosen.
  In parentheses: the largest absolute difference of the losses and of the state, and
  "fp64 Nx": the largest distance ratio where the float64 rule was needed.
* ``notes``: magpy: its monitor / mock / eager runs (``magpy.stats``) and eager steps;
  torch.compile: the compiled frames one step enters; errors, break reasons and the
  differences found, as footnotes (warnings are in the JSON).

``--ddp``: the same variants on a 2-process ``DistributedDataParallel`` run spawned from this
script (``torch.multiprocessing``, gloo over 127.0.0.1, one thread per process): the zoo's
ResNet-50 at test size (width 8, 64x64 images; BatchNorm buffers broadcast from rank 0 at each
forward, gradients all-reduced in backward), each rank on its own batches of ``--batch``; the
step calls the DDP-wrapped model.  Rank 0 reports: its times (every step ends with the same
all-reduce, so both ranks run in step) and its losses and state against eager DDP's.

``--fsdp``: the same 2-process run with FSDP2 instead: ``fully_shard`` on each child module of
the ResNet that holds parameters (the stem's convolution and BatchNorm, the four stages, the
classifier), then on the root.  magpy runs FSDP's forward hooks (all-gathers, parameter swaps,
reshards) as eager steps between the graphs and ``backward()`` eagerly (FSDP's reduce-scatters
run in its hooks) (magpy.training.fsdp); the state compared is rank 0's shards.

The exit status is 1 if a variant is incorrect or raised.  Results and machine information
are written as JSON to ``benchmarks/results/train.json`` (``--ddp``: ``train_ddp.json``,
``--fsdp``: ``train_fsdp.json``; ``--json PATH``).  The machine is shared: compare ratios
within one run, and use ``--threads 1``.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import gc
import itertools
import json
import math
import socket
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as `python benchmarks/train.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._inductor.utils  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import magpy  # noqa: E402
from benchmarks import run  # noqa: E402
from benchmarks.device import add_argument as add_device_argument  # noqa: E402
from benchmarks.device import describe as describe_device  # noqa: E402
from benchmarks.device import now, to_device  # noqa: E402
from benchmarks.models import MODELS  # noqa: E402
from benchmarks.models._utils import example_image  # noqa: E402
from magpy.backends import autopilot  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO / "benchmarks" / "results" / "train.json"
DDP_JSON = REPO / "benchmarks" / "results" / "train_ddp.json"
FSDP_JSON = REPO / "benchmarks" / "results" / "train_fsdp.json"
BATCHES = 4                       # distinct batches, used in turn
WARMUP = 1 + autopilot.TRIAL_CALLS    # untimed steps after step 2 (default): magpy's background
#                                      compile (started by step 3, waited for) and autopilot trial
STEPS, QUICK_STEPS = 10, 3        # timed steps
TOLERANCE = 1e-3                  # rtol = atol for Inductor variants
MULTIPLIER = 2.0                  # or this many times eager's distance to float64 (check()),
SMALL_MULTIPLIER, SMALL = 3.0, 1000   # this many for tensors under SMALL elements (torch's values)
DDP_MODEL, DDP_SIZE, DDP_WORLD = "resnet50", "test", 2
DDP_TIMEOUT_S = 900               # a collective one rank never joins fails after this (compiles included)
REGION = "Torch-Compiled Region: "


# ---------------------------------------------------------------------------------------------
# models, batches and losses


@dataclasses.dataclass(frozen=True)
class Task:
    """A model in training mode (the zoo's, or ``make``'s), its batches ``(x, y)``
    (``model(**x)``), its loss, and the step that trains it (``step``: :func:`train_step`'s
    signature)."""

    batches: Callable[..., list]        # (model, builder's args, kwargs, batch, seed) -> [(x, y)]
    loss: Callable[[nn.Module], Callable]   # model -> loss_fn(output, y)
    make: Callable | None = None        # size -> (model, args, kwargs) as the zoo's builders; None: the zoo's
    step: Callable | None = None        # (model, opt, loss_fn) -> step; None: train_step
    recordings: int = 2                 # magpy's recordings (the steps that record: 1, 2, ...)
    indexed: bool = False               # the step takes the call's index first: step(i, x, y)
    period: int = 1                     # calls between two uses of the least used steady record

    def build(self, name: str, size: str, batch: int, seed: int = 0,
              device: str = "cpu") -> tuple[nn.Module, list]:
        model, args, kwargs = (self.make or MODELS[name])(size)
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0   # see the module docstring: inductor's random numbers are not eager's
        batches = self.batches(model, args, kwargs, batch, seed)
        return model.train().to(device), to_device(batches, device)


def _image_batches(model, args, kwargs, batch, seed):
    (image,) = args
    return [({"x": example_image((batch, *image.shape[1:]), seed=seed + i)},
             torch.randint(0, model.fc.out_features, (batch,),
                           generator=torch.Generator().manual_seed(seed + i)))
            for i in range(BATCHES)]


def _classification_loss(model):
    return F.cross_entropy


def _text_batches(model, args, kwargs, batch, seed):
    # The builder's padding pattern (its last positions masked) on every row; fresh tokens.
    mask = kwargs["attention_mask"].expand(batch, -1).contiguous()
    vocab = model.config.vocab_size
    out = []
    for i in range(BATCHES):
        g = torch.Generator().manual_seed(seed + i)
        ids = torch.randint(1, vocab, mask.shape, generator=g) * mask   # 0: the pad id
        targets = torch.randint(1, vocab, mask.shape, generator=g).masked_fill(mask == 0, -100)
        out.append(({"input_ids": ids, "attention_mask": mask}, targets))
    return out


def _token_loss(model):
    embedding = model.embeddings.word_embeddings.weight

    def loss_fn(out, targets):
        logits = out.last_hidden_state @ embedding.t()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    return loss_fn


# The fine-tuning step: a sequence classifier from a config (random weights), its linear
# warm-up schedule stepped every step.  At test size the issue's config; at bench size a
# small BERT.  Sequences of FINETUNE_TOKENS tokens, FINETUNE_LABELS classes.
FINETUNE_CONFIGS = {
    "test": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 vocab_size=100),
    "bench": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                  vocab_size=1000),
}
FINETUNE_TOKENS, FINETUNE_LABELS = 64, 3
FINETUNE_WARMUP, FINETUNE_TOTAL = 3, 100   # schedule steps: warm-up ends during the warm-up steps


def _finetune_model(size: str):
    import transformers
    config = transformers.BertConfig(**FINETUNE_CONFIGS[size], max_position_embeddings=FINETUNE_TOKENS,
                                     num_labels=FINETUNE_LABELS)
    return transformers.BertForSequenceClassification(config), (), {}


def _label_batches(model, args, kwargs, batch, seed):
    vocab = model.config.vocab_size
    out = []
    for i in range(BATCHES):
        g = torch.Generator().manual_seed(seed + i)
        ids = torch.randint(0, vocab, (batch, FINETUNE_TOKENS), generator=g)
        out.append(({"input_ids": ids}, torch.randint(0, FINETUNE_LABELS, (batch,), generator=g)))
    return out


def _logits_loss(model):
    def loss_fn(out, labels):
        return F.cross_entropy(out.logits, labels)
    return loss_fn


def scheduled_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable) -> Callable:
    """The fine-tuning step as transformers' examples write it: gradients clipped, the
    learning rate of ``get_linear_schedule_with_warmup`` stepped every step (a new lr, and a
    new epoch count, every call)."""
    import transformers
    sched = transformers.get_linear_schedule_with_warmup(opt, FINETUNE_WARMUP, FINETUNE_TOTAL)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(**x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss
    return step


ACCUM = 4   # micro-batches per optimizer step of bert-accum


def accumulation_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable) -> Callable:
    """One micro-step of gradient accumulation over :data:`ACCUM` micro-batches: ``i`` is the
    training loop's index, the optimizer steps on every ``ACCUM``-th."""
    def step(i, x, y):
        loss = loss_fn(model(**x), y) / ACCUM
        loss.backward()
        if (i + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss
    return step


class LSTMLanguageModel(nn.Module):
    """A language model as people write one with a cell: ``LSTMCell`` stepped over the
    sequence in a Python loop, the hidden state of every step projected on the vocabulary."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.cell = nn.LSTMCell(hidden, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)                     # (length, batch, hidden)
        h = x.new_zeros(x.size(1), x.size(2))
        c = x.new_zeros(x.size(1), x.size(2))
        states = []
        for t in range(x.size(0)):
            h, c = self.cell(x[t], (h, c))
            states.append(h)
        return self.head(torch.stack(states))


# The LSTM language model: (vocabulary, hidden) by size; its batches' sequence lengths (one per
# batch: each call a new length; torch.compile recompiles per length until its limit).
LSTM_SIZES = {"test": (100, 32), "bench": (1000, 256)}
LSTM_LENGTHS = (17, 24, 31, 40)


def _lstm_model(size: str):
    return LSTMLanguageModel(*LSTM_SIZES[size]), (), {}


def _sequence_batches(model, args, kwargs, batch, seed):
    vocab = model.embed.num_embeddings
    out = []
    for i in range(BATCHES):
        g = torch.Generator().manual_seed(seed + i)
        length = LSTM_LENGTHS[i % len(LSTM_LENGTHS)]
        tokens = torch.randint(0, vocab, (length + 1, batch), generator=g)
        out.append(({"tokens": tokens[:-1]}, tokens[1:]))   # the next token at every step
    return out


def _next_token_loss(model):
    def loss_fn(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return loss_fn


TASKS = {"resnet50": Task(_image_batches, _classification_loss), "bert": Task(_text_batches, _token_loss),
         "bert-finetune": Task(_label_batches, _logits_loss, _finetune_model, scheduled_step,
                               recordings=FINETUNE_WARMUP),
         # (the last record, the first step with optimizer state, is made at micro-step 2 * ACCUM)
         "bert-accum": Task(_label_batches, _logits_loss, _finetune_model, accumulation_step,
                            recordings=2 * ACCUM, indexed=True, period=ACCUM),
         "lstm": Task(_sequence_batches, _next_token_loss, _lstm_model)}

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
}


def train_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable) -> Callable:
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(**x), y)
        loss.backward()
        opt.step()
        return loss
    return step


# ---------------------------------------------------------------------------------------------
# variants


@dataclasses.dataclass(frozen=True)
class Variant(run.Variant):
    compiled_autograd: bool = False

    def running(self):
        """The context the variant's step is made and runs in.  Compiled autograd traces DDP's
        gradient all-reduce only through DDP's Python reducer, which DDP picks when built."""
        if not self.compiled_autograd:
            return contextlib.nullcontext()
        return torch._dynamo.config.patch(compiled_autograd=True, optimize_ddp="python_reducer")

    @property
    def exact(self) -> bool:
        """Whether the variant must reproduce eager bit for bit: magpy with backend "eager"
        (the same operations in the same order).  Dynamo traces the optimizer its own way (the
        step count as a tensor, ``addcdiv``/``addcmul`` decomposed: AdamW's updates round
        differently), so torch.compile-eager is judged as Inductor is."""
        return self.compiler == "magpy" and self.backend == "eager"


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("eager", "eager", None),
    Variant("torch.compile-eager", "torch.compile", "eager"),
    Variant("magpy-eager", "magpy", "eager"),
    Variant("torch.compile", "torch.compile", "inductor"),
    Variant("torch.compile+ca", "torch.compile", "inductor", compiled_autograd=True),
    Variant("magpy", "magpy", "inductor"),
)}


# ---------------------------------------------------------------------------------------------
# running one variant


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every variant of one model runs: the model, its batches, the optimizer, the steps."""

    model: nn.Module
    batches: list
    loss: Callable[[nn.Module], Callable]
    make_opt: Callable
    warmup: int                                  # untimed steps after step 2
    steps: int                                   # timed steps
    wrap: Callable[[nn.Module], nn.Module] = run._identity   # --ddp: DistributedDataParallel
    make_step: Callable | None = None            # (model, opt, loss_fn) -> step; None: train_step
    indexed: bool = False                        # the step takes the call's index first

    def batch(self, i: int):
        return self.batches[i % len(self.batches)]

    def arguments(self, i: int) -> tuple:
        """What the ``i``-th call of the step gets: its batch, after ``i`` if indexed."""
        return (i, *self.batch(i)) if self.indexed else self.batch(i)


def dynamo_steps(one_step: Callable[[], None]) -> tuple[int, int] | None:
    """``(frames, graphs)`` one torch.compile'd step runs: the compiled frames it enters, and
    those with a non-empty graph (module docstring).  None if dynamo's metrics are unavailable."""
    try:
        with_graph = {m.compile_id for m in torch._dynamo.utils.get_compilation_metrics()
                      if m.graph_op_count}
    except Exception:  # internal API
        return None
    # (the compiled regions are CPU-side events: no CUDA activity, whose tracer may be missing)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        one_step()
    regions = [e.name[len(REGION):] for e in prof.events() if e.name.startswith(REGION)]
    return len(regions), sum(r in with_graph for r in regions)


def snapshot(model: nn.Module) -> dict:
    # (--fsdp: this rank's shards)
    return {k: _local(v).detach().clone() for k, v in model.state_dict().items()}


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def run_variant(variant: Variant, setup: Setup) -> tuple[dict, dict | None]:
    """Train a fresh copy of the model with ``variant`` and time it: its row, and what it
    trained (``{"loss": the losses, "state": the state_dict}``; None if it raised)."""
    row = {"variant": variant.name, "compiler": variant.compiler, "backend": variant.backend,
           "compiled_autograd": variant.compiled_autograd, "step1_s": None, "step2_s": None,
           "median_ms": None, "steps_per_s": None, "speedup": None, "graphs": None,
           "graphs_per_step": None, "correct": None, "loss_diff": None, "state_diff": None,
           "break_reasons": [], "notes": [], "warnings": [], "error": None,
           "loadavg_before": run._loadavg()}
    torch._dynamo.reset()
    counters.clear()
    magpy.reset()
    model = copy.deepcopy(setup.model)
    cache = (torch._inductor.utils.fresh_cache() if variant.backend == "inductor"
             else contextlib.nullcontext())
    losses: list[torch.Tensor] = []
    compiled, trained, caught, stage = None, None, [], "compile"

    def one_step():
        losses.append(compiled(*setup.arguments(len(losses))).detach())

    try:
        with cache, variant.running(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step = (setup.make_step or train_step)(setup.wrap(model), setup.make_opt(model.parameters()),
                                                   setup.loss(model))
            torch.manual_seed(0)
            start = now()
            compiled = variant.make(step)
            for i in (1, 2):
                stage = f"step {i}"
                t0 = now()
                one_step()
                row[f"step{i}_s"] = now() - t0
            stage = "warm-up / timed steps"
            for k in range(setup.warmup):
                one_step()
                if variant.compiler == "magpy":
                    # Step 3 reused step 2's record: it started the compile (a task recording
                    # later steps too starts their compile on their record's first reuse).
                    magpy.synchronize()
            times = run.time_calls(one_step, run.Timing(0, 0.0, setup.steps, setup.steps))
            row["total_s"] = now() - start
            row["steps"] = len(losses)
            trained = {"loss": torch.stack(losses), "state": snapshot(model)}
            if variant.compiler == "torch.compile":
                stage = "profiled step"
                row["dynamo_frames_graphs"] = dynamo_steps(one_step)
        row["median_ms"] = statistics.median(times) * 1e3
        row["steps_per_s"] = 1e3 / row["median_ms"]
        row["min_ms"], row["max_ms"] = min(times) * 1e3, max(times) * 1e3
        if row["median_ms"] > run.NOISY * row["min_ms"]:
            row["notes"].append(f"noisy: median {row['median_ms'] / row['min_ms']:.1f}x min")
        row["losses"] = trained["loss"].tolist()
    except Exception as e:  # a failing variant is a result: report it and go on
        row["error"] = f"{type(e).__name__} in {stage}: {run._first_line(e) or type(e).__name__}"
        row["traceback"] = traceback.format_exc()
        row["correct"] = False
    row["warnings"] = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))[:20]
    row["loadavg_after"] = run._loadavg()
    if compiled is not None:
        info = graph_info(variant, compiled, row)
        row["notes"] = info.pop("notes", []) + row["notes"]
        row.update(info)
    return row, trained


def float64(setup: Setup) -> Setup:
    """The same training in float64: the truth both float32 runs are measured against."""
    def cast(t):
        return t.double() if t.is_floating_point() else t
    batches = [({k: cast(v) for k, v in x.items()}, cast(y)) for x, y in setup.batches]
    return dataclasses.replace(setup, model=copy.deepcopy(setup.model).double(), batches=batches)


def check(variant: Variant, trained: dict, eager: dict, truth: dict | None) -> dict:
    """``trained`` against ``eager`` (the eager variant's) and, for Inductor, ``truth`` (the
    float64 run's): the losses as one tensor, then each tensor of the state.

    magpy-eager must give eager's values exactly.  Otherwise a tensor passes if it is
    ``allclose`` to eager's (rtol = atol = TOLERANCE) or, as in torch's own accuracy checks
    of compiled training (``torch._dynamo.utils.same`` with a float64 reference), if its RMS
    distance to the float64 values is at most MULTIPLIER times eager's (SMALL_MULTIPLIER
    under SMALL elements) plus TOLERANCE / 10: an ill-conditioned model (BatchNorm over a
    few values) or an adaptive optimizer amplifies rounding, eager's own rounding included.
    """
    tol = 0.0 if variant.exact else TOLERANCE
    out = {"loss_diff": 0.0, "state_diff": 0.0, "fp64_ratio": None, "problems": []}
    truths = _tensors(truth) if truth is not None else itertools.repeat((None, None))
    for (name, expected), (_, actual), (_, true) in zip(_tensors(eager), _tensors(trained), truths):
        what = "loss" if name == "loss" else "state"
        c = run.compare(expected, actual, rtol=tol, atol=tol)
        out[f"{what}_diff"] = max(out[f"{what}_diff"], c.max_abs_diff)
        if c.ok:
            continue
        if true is None or variant.exact or not expected.is_floating_point():
            out["problems"].append(f"{name}: {c.problems[0].removeprefix('out: ')}")
            continue
        error, eager_error = _rms(actual, true), _rms(expected, true)
        out["fp64_ratio"] = max(out["fp64_ratio"] or 0.0, error / eager_error if eager_error else math.inf)
        multiplier = MULTIPLIER if expected.numel() >= SMALL else SMALL_MULTIPLIER
        if not error <= multiplier * eager_error + TOLERANCE / 10:   # (NaN: not correct)
            out["problems"].append(f"{name}: max abs diff {c.max_abs_diff:.2g}; RMS distance to float64 "
                                   f"{error:.2g}, eager's {eager_error:.2g}")
    out["correct"] = not out["problems"]
    return out


def _tensors(trained: dict) -> list:
    return [("loss", trained["loss"]), *trained["state"].items()]


def _rms(a: torch.Tensor, truth: torch.Tensor) -> float:
    return float((a.double() - truth).pow(2).mean().sqrt())


def graph_info(variant: Variant, compiled, row: dict) -> dict:
    """run.graph_info's graphs and break reasons, with the graphs per step and notes of a step."""
    if variant.compiler == "eager":
        return {}
    info = run.graph_info(variant, compiled)
    if variant.compiler == "magpy":
        s = magpy.stats(compiled)
        info["graphs_per_step"] = s.graphs_per_call
        info["recorded"] = s.monitor_runs
        info["notes"] = (["EAGER FALLBACK"] if s.eager_runs else []) + [
            f"runs: {s.monitor_runs} monitor, {s.mock_runs} mock, {s.eager_runs} eager"]
        info["notes"] += [f"eager step: {run._first_line(reason)}" for reason in s.breaks]
        return info
    info["notes"] = []
    frames_graphs = row.get("dynamo_frames_graphs")
    if frames_graphs is not None:
        frames, info["graphs_per_step"] = frames_graphs
        info["notes"].append(f"{frames} frames/step")
    info["graph_breaks"] = sum(counters.get("graph_break", {}).values())
    info["recorded"] = info.get("graphs")   # each a trace of a frame
    if variant.compiled_autograd:
        info["notes"].append(f"compiled autograd captures: {counters['compiled_autograd']['captures']}")
    return info


def run_model(name: str, task: Task, opts: argparse.Namespace, size: str, batch: int,
              wrap=run._identity, seed: int = 0, log=None) -> list[dict]:
    model, batches = task.build(name, size, batch, seed, getattr(opts, "device", "cpu"))
    # A task recording after step 2 warms up longer: each later recording's first reuse starts
    # its compile, and its autopilot trial follows (over ``period`` times as many calls where
    # a record serves one call in ``period``).
    warmup = opts.warmup * task.period + task.recordings - 2
    setup = Setup(model, batches, task.loss, OPTIMIZERS[opts.opt], warmup, opts.steps, wrap, task.step,
                  task.indexed)
    base = {"model": name, "size": size, "batch": batch, "opt": opts.opt,
            "inputs": run.describe_inputs((), batches[0][0])}
    log = log or _say
    # The float64 run is needed only to judge the inexact variants.
    truth = None
    if not all(v.exact for v in opts.variant_list):
        log(f"  {name}: float64 eager run (the reference of the inductor variants) ...")
        truth = run_variant(VARIANTS["eager"], float64(setup))[1]
    rows, eager = [], None
    for v in opts.variant_list:
        log(f"  {name}: {v.name} ...")
        t0 = time.perf_counter()
        row, trained = run_variant(v, setup)
        # the variant's compiled callable and its graphs are garbage now: free them before the next
        torch._dynamo.reset()
        magpy.reset()
        gc.collect()
        row = dict(base, **row, variant_wall_s=time.perf_counter() - t0)
        if v.name == "eager":
            eager, row["correct"] = trained, trained is not None
        elif trained is not None and eager is not None:
            row.update(check(v, trained, eager, truth))
        rows.append(row)
        log(f"  {name}: {v.name} {row['variant_wall_s']:.1f} s"
            + (f"  {row['error']}" if row["error"] else ""))
    eager = rows[0].get("median_ms")
    for r in rows:
        if eager and r.get("median_ms"):
            r["speedup"] = eager / r["median_ms"]
    return rows


def _say(text: str) -> None:
    print(text, flush=True)


def _quiet(text: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# --ddp


def fully_shard_layers(model: nn.Module) -> nn.Module:
    """``fully_shard`` on each child of ``model`` that holds parameters, then on ``model``."""
    from torch.distributed.fsdp import fully_shard
    for child in model.children():
        if any(True for _ in child.parameters()):
            fully_shard(child)
    return fully_shard(model)


def ddp_worker(rank: int, world: int, port: int, opts: argparse.Namespace, path: str) -> None:
    """One process of the --ddp (--fsdp) run; rank 0 writes its rows to ``path``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=DDP_TIMEOUT_S))
    try:
        # Each rank trains on its own batches (seeds 1000 * rank + i): the all-reduce matters.
        rows = run_model(DDP_MODEL, TASKS[DDP_MODEL], opts, DDP_SIZE, opts.batch, seed=1000 * rank,
                         wrap=fully_shard_layers if opts.fsdp else nn.parallel.DistributedDataParallel,
                         log=_say if rank == 0 else _quiet)
        if rank == 0:
            Path(path).write_text(json.dumps(rows, default=str))
    finally:
        dist.destroy_process_group()


def run_ddp(opts: argparse.Namespace) -> list[dict]:
    with socket.socket() as s:   # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "rows.json")
        torch.multiprocessing.spawn(ddp_worker, args=(DDP_WORLD, port, opts, path), nprocs=DDP_WORLD)
        rows = json.loads(Path(path).read_text())
    for r in rows:
        r["model"] = f"{DDP_MODEL} {'FSDP2' if opts.fsdp else 'DDP'}x{DDP_WORLD}"
    return rows


# ---------------------------------------------------------------------------------------------
# reporting


COLUMNS = ("model", "variant", "step 1 s", "step 2 s", "total s", "ms/step", "steps/s", "speedup",
           "graphs/step", "compiled", "recorded", "kept", "correct", "notes")
RIGHT = {2, 3, 4, 5, 6, 7, 8, 9, 10}


def table_cells(rows: list[dict]) -> tuple[list[list[str]], list[str]]:
    """The table's cells, and footnotes (errors, break reasons, warnings, mismatches)."""
    cells, footnotes = [], []

    def note(text: str) -> str:
        footnotes.append(text)
        return f"[{len(footnotes)}]"

    for r in rows:
        where = f"{r['model']} / {r['variant']}"
        refs = []
        if r.get("error"):
            refs.append(note(f"{where}: {r['error']}"))
        if r.get("break_reasons"):
            refs.append(note(f"{where} break reasons:\n      "
                             + "\n      ".join(run._first_line(b) for b in r["break_reasons"])))
        if r.get("problems"):
            refs.append(note(f"{where} differences:\n      " + "\n      ".join(r["problems"][:5])))
        compiled = "-" if r.get("graphs") is None else str(r["graphs"])
        if r.get("graph_breaks") is not None:
            compiled += f", {r['graph_breaks']} breaks"
        cells.append([r["model"], r["variant"], run._fmt(r.get("step1_s"), ".2f"),
                      run._fmt(r.get("step2_s"), ".2f"), run._fmt(r.get("total_s"), ".1f"),
                      run._fmt(r.get("median_ms"), ".1f"),
                      run._fmt(r.get("steps_per_s"), ".2f"),
                      run._fmt(r.get("speedup"), ".2f"), run._fmt(r.get("graphs_per_step"), "d"), compiled,
                      recorded_cell(r), kept_cell(r), correct_cell(r),
                      "; ".join((r.get("notes") or []) + refs)])
    return cells, footnotes


def recorded_cell(r: dict) -> str:
    """Recordings in all the steps: magpy's monitor runs, torch.compile's traced graphs."""
    if r.get("recorded") is None or not r.get("steps"):
        return "-"
    return f"{r['recorded']} in {r['steps']}"


def kept_cell(r: dict) -> str:
    """run._kept_cell, or "on trial" where no magpy graph has finished its autopilot trial (the
    timed steps then ran compiled and eager versions in turn)."""
    on_trial = (r.get("compiler") == "magpy" and r.get("backend") != "eager" and r.get("graphs")
                and r.get("kept") == {})
    return "on trial" if on_trial and magpy.config.autopilot else run._kept_cell(r)


def correct_cell(r: dict) -> str:
    if r.get("error"):
        return "ERROR"
    if r["variant"] == "eager":
        return "reference"
    if r.get("correct") is None:
        return "?"
    diffs = f"loss {r['loss_diff']:.1e}, state {r['state_diff']:.1e}"
    if r.get("fp64_ratio") is not None:
        diffs += f"; fp64 {r['fp64_ratio']:.1f}x"
    return f"{'yes' if r['correct'] else 'NO'} ({diffs})"


def print_table(rows: list[dict]) -> None:
    cells, footnotes = table_cells(rows)
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]

    def line(values):
        return "  ".join(v.rjust(w) if i in RIGHT else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    print(line(COLUMNS))
    print("-" * len(line(COLUMNS)))
    for i, row in enumerate(cells):
        if i and row[0] != cells[i - 1][0]:
            print()
        print(line(row))
    for i, f in enumerate(footnotes, 1):
        print(("\n" if i == 1 else "") + f"[{i}] {f}")


def markdown_table(rows: list[dict]) -> str:
    cells, _ = table_cells(rows)
    out = ["| " + " | ".join(COLUMNS) + " |",
           "|" + "|".join("---:" if i in RIGHT else "---" for i in range(len(COLUMNS))) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(TASKS), help="comma-separated, from: " + ",".join(TASKS))
    parser.add_argument("--size", default="bench", choices=("test", "bench"), help="zoo size (default bench)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8; --ddp: per process)")
    parser.add_argument("--opt", default="sgd", choices=tuple(OPTIMIZERS),
                        help="sgd (default: lr 0.01, momentum 0.9) or adamw (lr 1e-3, weight decay 0.01)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, from: " + ",".join(VARIANTS) + " (default: all; eager is "
                             "always run: it is the reference)")
    parser.add_argument("--steps", type=int, help=f"timed steps (default {STEPS}; --quick {QUICK_STEPS})")
    parser.add_argument("--warmup", type=int, default=WARMUP,
                        help=f"untimed steps after step 2, every variant (default {WARMUP}: "
                             "magpy.backends.autopilot.TRIAL_CALLS)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} timed steps")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's; --ddp: 1 "
                                                    "per process)")
    parser.add_argument("--ddp", action="store_true",
                        help=f"{DDP_WORLD}-process DistributedDataParallel run of {DDP_MODEL} at {DDP_SIZE} "
                             "size instead (--models and --size do not apply)")
    parser.add_argument("--fsdp", action="store_true",
                        help=f"{DDP_WORLD}-process FSDP2 (fully_shard) run of {DDP_MODEL} at {DDP_SIZE} "
                             "size instead (--models and --size do not apply)")
    parser.add_argument("--json", metavar="PATH",
                        help=f"where to write the results (default: {DEFAULT_JSON}; --ddp: {DDP_JSON})")
    add_device_argument(parser)
    opts = parser.parse_args(argv)
    opts.model_list = [m for m in opts.models.split(",") if m]
    unknown = [m for m in opts.model_list if m not in TASKS]
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {list(TASKS)}")
    names = [v for v in opts.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    opts.variant_list = [v for v in VARIANTS.values() if v.name in names or v.name == "eager"]
    if opts.steps is None:
        opts.steps = QUICK_STEPS if opts.quick else STEPS
    if opts.steps < 1 or opts.batch < 1 or opts.warmup < 0:
        parser.error("--steps and --batch must be at least 1, --warmup at least 0")
    if opts.json is None:
        opts.json = str(FSDP_JSON if opts.fsdp else DDP_JSON if opts.ddp else DEFAULT_JSON)
    if opts.ddp and opts.fsdp:
        parser.error("--ddp or --fsdp, not both")
    if (opts.ddp or opts.fsdp) and opts.device != "cpu":
        parser.error("--ddp and --fsdp run on the CPU (gloo) only")
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    start = time.perf_counter()
    info = run.machine_info()
    load = info["loadavg"]
    print(f"torch {info['torch']}, python {info['python']}, transformers {info['transformers']}, "
          f"magpy {info['magpy']}; {info['cpu']}, {info['cpu_count']} cores, "
          + (f"{DDP_WORLD} processes x 1 thread" if opts.ddp or opts.fsdp else f"threads {info['threads']}")
          + f", device {describe_device(opts.device)}"
          + (f", load average {load[0]:.2f}" if load else ""))
    engine = "FSDP2" if opts.fsdp else "DDP"
    what = (f"{DDP_MODEL} ({DDP_SIZE}) {engine} x{DDP_WORLD}" if opts.ddp or opts.fsdp
            else f"{opts.models} ({opts.size})")
    print(f"{what}, batch {opts.batch}, {opts.opt}; steps: 2 compiling, {opts.warmup} warm-up, "
          f"{opts.steps} timed; inductor cache fresh per variant\n", flush=True)
    rows = run_ddp(opts) if opts.ddp or opts.fsdp else [
        r for name in opts.model_list
        for r in run_model(name, TASKS[name], opts, opts.size, opts.batch)]
    wall = time.perf_counter() - start
    saved = {k: v for k, v in vars(opts).items() if k != "variant_list"}
    run.write_json(Path(opts.json), info, saved, rows, complete=True, wall_s=wall)
    print()
    print_table(rows)
    print("\nmarkdown:\n")
    print(markdown_table(rows))
    print(f"\ntotal wall time {wall:.1f} s; wrote {opts.json}")
    failed = [r for r in rows if r.get("correct") is not True]
    if failed:
        print("FAIL: " + ", ".join(f"{r['model']}/{r['variant']}" for r in failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
