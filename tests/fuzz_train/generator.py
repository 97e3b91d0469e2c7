"""Random training loops, written the ways people write them.

``generate(seed)`` draws one value per dimension (:class:`Loop`, a readable description)
with a seeded ``random.Random``; ``Loop.source()`` is the loop as a Python module a person
can read and run: ``batch(i, rank)`` and ``val_batch()`` make the data, ``build(compile)``
makes one twin (``torch.manual_seed(0)`` first, so two twins start equal) and returns its
objects and ``step(i, x, y, xv, yv)``, the loop's body for step ``i``; ``compile`` is what
the twin applies to the compiled part (the identity for the eager twin,
``magpy.compile(..., backend=...)`` for the other).  The runner supplies the process group
(``Loop.process_group``) and the outer ``for i in range(STEPS)``.

Invariants that keep every loop valid in eager PyTorch (each found by running loops eager
against eager, ``runner.run(loop, backend="none")``): fused optimizers are the four torch
2.13 has on the CPU, and not with FSDP2 (DTensor has no sharding strategy for them, nor for
Rprop); ``add_param_group`` only with the schedulers that take a new group
(:data:`ADD_GROUP_SCHEDULERS`); OneCycleLR cycles the momentum only where the optimizer has
one; FSDP2 only with the MLP and the conv net, no EMA (``AveragedModel`` deep-copies the
model) and no bf16 parameters for the conv net (BatchNorm); the batch (8) splits into any
``k`` micro-batches.
"""
from __future__ import annotations

import dataclasses
import random
import textwrap

MODELS = ("mlp", "mlp", "convnet", "lstm")
WRAPPERS = ("plain", "plain", "plain", "ddp", "fsdp")
# name -> (class, keyword arguments, optional extras, fused on the CPU, momentum or betas)
OPTIMIZERS = {
    "SGD": ("SGD", {"lr": 0.05}, ({"weight_decay": 0.01}, {"maximize": True}), True, False),
    "SGD-momentum": ("SGD", {"lr": 0.05, "momentum": 0.9}, ({"dampening": 0.1}, {"weight_decay": 0.01}),
                     True, True),
    "SGD-nesterov": ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}, ({"weight_decay": 0.01},), True,
                     True),
    "Adam": ("Adam", {"lr": 0.01}, ({"amsgrad": True}, {"weight_decay": 0.01}, {"betas": (0.8, 0.99)}), True,
             True),
    "AdamW": ("AdamW", {"lr": 0.01, "weight_decay": 0.01}, ({"amsgrad": True}, {"maximize": True}), True,
              True),
    "Adagrad": ("Adagrad", {"lr": 0.05}, ({"lr_decay": 0.01}, {"initial_accumulator_value": 0.1}), True,
                False),
    "Adadelta": ("Adadelta", {"lr": 1.0}, ({"rho": 0.8}, {"weight_decay": 0.01}), False, False),
    "Adamax": ("Adamax", {"lr": 0.02}, ({"weight_decay": 0.01},), False, True),
    "NAdam": ("NAdam", {"lr": 0.01}, ({"decoupled_weight_decay": True, "weight_decay": 0.01},
                                       {"momentum_decay": 0.002}), False, True),
    "RAdam": ("RAdam", {"lr": 0.01}, ({"decoupled_weight_decay": True, "weight_decay": 0.01},), False, True),
    "RMSprop": ("RMSprop", {"lr": 0.005}, ({"momentum": 0.9}, {"centered": True}, {"weight_decay": 0.01}),
                False, True),
    "Rprop": ("Rprop", {"lr": 0.01}, ({"etas": (0.4, 1.3)},), False, False),
    "ASGD": ("ASGD", {"lr": 0.05, "t0": 3}, ({"weight_decay": 0.01},), False, False),
}
SCHEDULERS = ("none", "none", "StepLR", "OneCycleLR", "CosineAnnealingWarmRestarts", "LambdaLR",
              "ReduceLROnPlateau", "SequentialLR")
# The schedulers that take a parameter group added after them (the others zip their
# per-group lists with the groups, strictly, in torch 2.13).
ADD_GROUP_SCHEDULERS = ("none", "StepLR", "ReduceLROnPlateau")
ZERO_WHERE = ("first", "last", "loop")   # start of the step, after opt.step(), in the loop before the step
ZERO_HOW = ("opt.zero_grad()", "opt.zero_grad(set_to_none=False)", "model.zero_grad()",
            "model.zero_grad(set_to_none=False)")
COMPILED = ("step", "step", "step", "model", "loss")


@dataclasses.dataclass
class Loop:
    """One training loop: a value per dimension (see :func:`generate`)."""

    seed: int
    steps: int = 12
    model: str = "mlp"               # mlp | convnet (BatchNorm) | lstm
    task: str = "regression"         # regression (mse) | classification (cross_entropy)
    dropout: bool = False
    wrapper: str = "plain"           # plain | ddp | fsdp
    process_group: bool = False      # a gloo process group (always for ddp and fsdp)
    ddp_compiled: str = "inner"      # compiled model with DDP: DDP(compile(model)) or compile(DDP(model))
    reshard: bool = True             # fsdp: reshard_after_forward
    fsdp_bf16: bool = False          # fsdp: MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    optimizer: str = "SGD"
    impl: str = "forloop"            # forloop (foreach=False) | foreach | fused
    opt_extra: dict = dataclasses.field(default_factory=dict)
    decay_groups: bool = False       # weight-decay parameter groups (matrices / the rest)
    frozen: bool = False             # the first layer requires_grad_(False)
    frozen_in_opt: bool = True       # ... and still handed to the optimizer
    add_group: int = 0               # > 0: the last layer joins the optimizer at this step
    scheduler: str = "none"
    sched_in_step: bool = True       # scheduler stepped in the step (else in the loop)
    zero_where: str = "first"
    zero_how: str = "opt.zero_grad()"
    accum: int = 1                   # micro-batches per optimizer step (loss / k)
    accum_inner: bool = False        # the step loops over the micro-batches (else one per call, with i)
    clip: str = "none"               # none | norm | value
    amp: str = "none"                # none | bf16 (autocast) | bf16-scaler (autocast and GradScaler)
    eval_every: int = 0              # > 0: an eval pass under no_grad every so many steps
    ema: str = "none"                # none | step | loop: AveragedModel updated in the step or the loop
    ema_buffers: bool = False        # AveragedModel(use_buffers=True)
    compiled: str = "step"           # step | model | loss
    background: bool = True          # magpy.config.background_compile
    autopilot: bool = True           # magpy.config.autopilot

    # ------------------------------------------------------------------ derived

    @property
    def ranks_needed(self) -> bool:
        return self.wrapper != "plain"

    @property
    def micro_calls(self) -> bool:
        """One micro-batch per call, the step index steering the update."""
        return self.accum > 1 and not self.accum_inner

    def describe(self) -> str:
        """One readable paragraph."""
        extra = "".join(f", {k}={v!r}" for k, v in self.opt_extra.items())
        opt = f"{self.optimizer}({self.impl}{extra})"
        ddp = "DDP(compile(model))" if self.ddp_compiled == "inner" else "compile(DDP(model))"
        bf16 = ", bf16 params" if self.fsdp_bf16 else ""
        parts = [
            f"{self.model}{'+dropout' if self.dropout else ''} ({self.task})",
            {"plain": "plain module", "ddp": f"DDP ({ddp} where the model is compiled)",
             "fsdp": f"FSDP2 (reshard_after_forward={self.reshard}{bf16})"}[self.wrapper]
            + (", process group" if self.process_group else ", no process group"),
            opt + (", weight-decay groups" if self.decay_groups else ""),
            f"scheduler {self.scheduler}" + ("" if self.scheduler == "none" else
                                              f" ({'in the step' if self.sched_in_step else 'in the loop'})"),
            f"zero_grad {self.zero_where} ({self.zero_how})",
            f"accumulate {self.accum}" + ("" if self.accum == 1 else " (inner loop)" if self.accum_inner
                                          else " (a micro-batch per call)"),
        ]
        if self.clip != "none":
            parts.append(f"clip_grad_{self.clip}")
        if self.amp != "none":
            parts.append("autocast bf16" + (" + GradScaler" if self.amp == "bf16-scaler" else ""))
        if self.frozen:
            parts.append("first layer frozen" + (" (in the optimizer)" if self.frozen_in_opt else ""))
        if self.add_group:
            parts.append(f"last layer added to the optimizer at step {self.add_group}")
        if self.eval_every:
            parts.append(f"eval pass every {self.eval_every} steps")
        if self.ema != "none":
            parts.append(f"EMA updated in the {self.ema}" + (" (use_buffers)" if self.ema_buffers else ""))
        parts.append(f"compiled: the {self.compiled}")
        parts.append(f"background_compile={self.background}, autopilot={self.autopilot}, {self.steps} steps")
        return "; ".join(parts)

    def source(self) -> str:
        """The loop as a Python module (see the module docstring)."""
        return _Writer(self).module()


# ----------------------------------------------------------------------------- generation

def generate(seed: int) -> Loop:
    """The loop of ``seed`` (the same loop for the same seed, always)."""
    r = random.Random(seed)
    L = Loop(seed)
    L.model = r.choice(MODELS)
    L.task = r.choice(("regression", "classification"))
    L.dropout = r.random() < 0.4
    L.wrapper = r.choice(WRAPPERS)
    if L.wrapper == "fsdp" and L.model == "lstm":
        L.model = "mlp"
    L.process_group = L.wrapper != "plain" or r.random() < 0.4
    L.ddp_compiled = r.choice(("inner", "outer"))
    L.reshard = r.random() < 0.6
    L.fsdp_bf16 = L.wrapper == "fsdp" and L.model != "convnet" and r.random() < 0.3
    L.optimizer = r.choice(tuple(OPTIMIZERS))
    if L.wrapper == "fsdp" and L.optimizer == "Rprop":
        L.optimizer = "RMSprop"
    _, _, extras, fused, _ = OPTIMIZERS[L.optimizer]
    fused = fused and L.wrapper != "fsdp"
    L.impl = r.choice(("forloop", "foreach", "fused") if fused else ("forloop", "foreach"))
    L.opt_extra = {}
    for extra in extras:
        if r.random() < 0.25:
            L.opt_extra.update(extra)
    L.decay_groups = r.random() < 0.3
    L.frozen = r.random() < 0.2
    L.frozen_in_opt = r.random() < 0.5
    L.scheduler = r.choice(SCHEDULERS)
    L.sched_in_step = r.random() < 0.6
    L.add_group = r.choice((0, 0, 0, 4, 5)) if L.scheduler in ADD_GROUP_SCHEDULERS else 0
    if L.frozen and L.model == "lstm":   # (two layers: the optimizer would start empty)
        L.add_group = 0
    L.zero_where = r.choice(ZERO_WHERE)
    L.zero_how = r.choice(ZERO_HOW)
    L.accum = r.choice((1, 1, 2, 3, 4))
    L.accum_inner = r.random() < 0.4
    L.clip = r.choice(("none", "none", "norm", "value"))
    L.amp = r.choice(("none", "none", "none", "bf16", "bf16-scaler"))
    if L.model == "lstm":   # (oneDNN has no bf16 LSTM on CPUs without AVX-512 BF16: eager raises)
        L.amp = "none"
    L.eval_every = r.choice((0, 0, 3, 4)) if L.dropout or r.random() < 0.5 else 0
    L.ema = r.choice(("none", "none", "step", "loop")) if L.wrapper != "fsdp" else "none"
    L.ema_buffers = r.random() < 0.3
    L.compiled = r.choice(COMPILED)
    L.background = r.random() < 0.5
    L.autopilot = r.random() < 0.8
    L.steps = 12 if not L.micro_calls else max(12, 4 * L.accum)
    return L


# ----------------------------------------------------------------------------- the source

def _lines(text: str, indent: int) -> list[str]:
    pad = " " * indent
    return [pad + line if line else "" for line in text.splitlines()]


class _Writer:
    def __init__(self, loop: Loop):
        self.L = loop

    # the pieces ---------------------------------------------------------------

    def model_lines(self) -> list[str]:
        L = self.L
        drop = "nn.Dropout(0.25), " if L.dropout else ""
        if L.model == "mlp":
            return [f"model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), {drop}nn.Linear(16, 16), nn.Tanh(), "
                    f"nn.Linear(16, 4))",
                    "layers = [m for m in model if isinstance(m, nn.Linear)]"]
        if L.model == "convnet":
            # (no bias before BatchNorm, as people write it: its gradient is rounding noise, which
            # optimizers that normalise the update, RMSprop, Adam, blow up into full steps)
            return ["model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), "
                    f"nn.ReLU(), {drop}nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 4))",
                    "layers = [m for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]"]
        return ["model = LSTMNet(dropout=" + ("0.25" if L.dropout else "0.0") + ")",
                "layers = [model.lstm, model.head]"]

    def data_shape(self) -> str:
        return {"mlp": "(8, 8)", "convnet": "(8, 3, 8, 8)", "lstm": "(8, 5, 6)"}[self.L.model]

    def optimizer_expr(self, params: str) -> str:
        L = self.L
        cls, kwargs, _, _, _ = OPTIMIZERS[L.optimizer]
        kw = dict(kwargs)
        kw.update(L.opt_extra)
        kw.update({"forloop": {"foreach": False}, "foreach": {"foreach": True},
                   "fused": {"fused": True}}[L.impl])
        return f"torch.optim.{cls}({params}, " + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")"

    def scheduler_expr(self) -> str | None:
        L = self.L
        lrs = "torch.optim.lr_scheduler"
        n_opt = L.steps // L.accum if L.micro_calls else L.steps
        _, kwargs, _, _, momentum = OPTIMIZERS[L.optimizer]
        return {
            "none": None,
            "StepLR": f"{lrs}.StepLR(opt, step_size=3, gamma=0.5)",
            "OneCycleLR": f"{lrs}.OneCycleLR(opt, max_lr={kwargs['lr'] * 4!r}, total_steps={n_opt + 2}, "
                          f"cycle_momentum={momentum})",
            "CosineAnnealingWarmRestarts": f"{lrs}.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, "
                                           f"eta_min=1e-4)",
            "LambdaLR": f"{lrs}.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4) * 0.95 ** s)",
            "ReduceLROnPlateau": f"{lrs}.ReduceLROnPlateau(opt, factor=0.5, patience=1, threshold=0.05, "
                                 f"min_lr=1e-5)",
            "SequentialLR": f"{lrs}.SequentialLR(opt, [{lrs}.LinearLR(opt, start_factor=0.25, "
                            f"total_iters=3), {lrs}.ExponentialLR(opt, gamma=0.9)], milestones=[3])",
        }[L.scheduler]

    def sched_call(self, loss: str) -> str:
        return f"sched.step({loss}.item())" if self.L.scheduler == "ReduceLROnPlateau" else "sched.step()"

    def forward_loss(self, x: str, y: str, divide: bool) -> list[str]:
        L = self.L
        k = f" / {L.accum}" if divide and L.accum > 1 else ""
        body = [f"loss = loss_fn(net({x}), {y}){k}"]
        if L.amp != "none":
            body = ['with torch.autocast("cpu", dtype=torch.bfloat16):'] + _lines("\n".join(body), 4)
        back = "scaler.scale(loss).backward()" if L.amp == "bf16-scaler" else "loss.backward()"
        return body + [back]

    def update(self) -> list[str]:
        """What runs once per optimizer step, after the backward(s)."""
        L = self.L
        out = []
        if L.clip != "none" and L.amp == "bf16-scaler":
            out.append("scaler.unscale_(opt)")
        if L.clip == "norm":
            out.append("nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
        elif L.clip == "value":
            out.append("nn.utils.clip_grad_value_(model.parameters(), 0.05)")
        if L.amp == "bf16-scaler":
            out += ["scaler.step(opt)", "scaler.update()"]
        else:
            out.append("opt.step()")
        if L.scheduler != "none" and L.sched_in_step:
            out.append(self.sched_call("loss"))
        if L.ema == "step":
            out.append("ema.update_parameters(model)")
        if L.zero_where == "last":
            out.append(L.zero_how)
        return out

    def train_step(self) -> list[str]:
        L = self.L
        if L.micro_calls:
            k = L.accum
            out = ["def train_step(i, x, y):"]
            if L.zero_where == "first":
                out += [f"    if i % {k} == 0:", f"        {L.zero_how}"]
            out += _lines("\n".join(self.forward_loss("x", "y", True)), 4)
            out += [f"    if (i + 1) % {k} == 0:"] + _lines("\n".join(self.update()), 8)
        else:
            out = ["def train_step(x, y):"]
            if L.zero_where == "first":
                out.append(f"    {L.zero_how}")
            if L.accum > 1:
                out.append(f"    for xb, yb in zip(x.chunk({L.accum}), y.chunk({L.accum})):")
                out += _lines("\n".join(self.forward_loss("xb", "yb", True)), 8)
            else:
                out += _lines("\n".join(self.forward_loss("x", "y", False)), 4)
            out += _lines("\n".join(self.update()), 4)
        out.append("    return loss.detach()")
        return out

    def loop_step(self) -> list[str]:
        L = self.L
        boundary = f"(i + 1) % {L.accum} == 0" if L.micro_calls else None
        out = ["def step(i, x, y, xv, yv):",
               '    """The loop\'s body at step i (the runner compares the twins after it)."""',
               "    out = {}"]
        if L.add_group:
            out += [f"    if i == {L.add_group}:",
                    "        opt.add_param_group({'params': late, 'lr': "
                    + repr(OPTIMIZERS[L.optimizer][1]['lr'] / 2) + "})"]
        if L.zero_where == "loop":
            out += ([f"    if i % {L.accum} == 0:", f"        {L.zero_how}"] if L.micro_calls
                    else [f"    {L.zero_how}"])
        out.append("    out['loss'] = loss = train_step(i, x, y)" if L.micro_calls
                   else "    out['loss'] = loss = train_step(x, y)")
        after = []
        if L.scheduler != "none" and not L.sched_in_step:
            after.append(self.sched_call("loss"))
        if L.ema == "loop":
            after.append("ema.update_parameters(model)")
        if after:
            out += ([f"    if {boundary}:"] + _lines("\n".join(after), 8) if boundary
                    else _lines("\n".join(after), 4))
        if L.eval_every:
            out += [f"    if i % {L.eval_every} == {L.eval_every - 1}:",
                    "        net.eval()",
                    "        with torch.no_grad():",
                    "            out['eval'] = loss_fn(net(xv), yv)",
                    "        net.train()"]
        out.append("    return out")
        return out

    def build(self) -> list[str]:
        L = self.L
        b = ['"""One twin: its objects and the loop\'s body; ``compile`` is applied to the compiled part."""',
             "torch.manual_seed(0)"]
        b += self.model_lines()
        if L.frozen:
            b.append("layers[0].requires_grad_(False)")
        b.append("late = " + ("list(layers[-1].parameters())" if L.add_group else "[]")
                 + "   # parameters the optimizer gets later (add_param_group)")
        if L.ema != "none":
            b.append("ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9)"
                     + (", use_buffers=True)" if L.ema_buffers else ")"))
        else:
            b.append("ema = None")
        # the wrapper, and where compile goes around the model
        compile_model = L.compiled == "model"
        if L.wrapper == "ddp":
            if compile_model and L.ddp_compiled == "inner":
                b.append("net = DDP(compile(model))")
            elif compile_model:
                b.append("net = compile(DDP(model))")
            else:
                b.append("net = DDP(model)")
        elif L.wrapper == "fsdp":
            kw = f"reshard_after_forward={L.reshard}" + (
                ", mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16)" if L.fsdp_bf16 else "")
            b += ["for layer in layers:", f"    fully_shard(layer, {kw})", f"fully_shard(model, {kw})"]
            b.append("net = compile(model)" if compile_model else "net = model")
        else:
            b.append("net = compile(model)" if compile_model else "net = model")
        # the optimizer's parameters
        keep = "p.requires_grad and " if L.frozen and not L.frozen_in_opt else ""
        b.append(f"params = [p for p in model.parameters() if {keep}not any(p is q for q in late)]")
        if L.decay_groups:
            b += ["groups = [{'params': [p for p in params if p.ndim >= 2], 'weight_decay': 0.05},",
                  "          {'params': [p for p in params if p.ndim < 2], 'weight_decay': 0.0}]",
                  "opt = " + self.optimizer_expr("groups")]
        else:
            b.append("opt = " + self.optimizer_expr("params"))
        sched = self.scheduler_expr()
        b.append(f"sched = {sched}" if sched else "sched = None")
        b.append('scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)'
                 if L.amp == "bf16-scaler" else "scaler = None")
        b.append("")
        if L.task == "classification":
            b += ["def loss_fn(out, y):", "    return F.cross_entropy(out, y)"]
        else:
            b += ["def loss_fn(out, y):", "    return F.mse_loss(out, y)"]
        if L.compiled == "loss":
            b.append("loss_fn = compile(loss_fn)")
        b.append("")
        b += self.train_step()
        if L.compiled == "step":
            b.append("train_step = compile(train_step)")
        b.append("")
        b += self.loop_step()
        b.append("")
        compiled = {"step": "train_step", "model": "net", "loss": "loss_fn"}[L.compiled]
        b.append("return dict(model=model, opt=opt, sched=sched, scaler=scaler, ema=ema, step=step, "
                 f"compiled={compiled})")
        return ["def build(compile):"] + _lines("\n".join(b), 4)

    def module(self) -> str:
        L = self.L
        y = "torch.randint(0, 4, (8,), generator=g)" if L.task == "classification" else \
            "torch.randn(8, 4, generator=g)"
        head = ['"""' + textwrap.fill(f"Training loop {L.seed}: {L.describe()}.", 100, subsequent_indent=""),
                "",
                f"The runner: a gloo process group: {'yes' if L.process_group else 'no'}; then for i in "
                "range(STEPS): step(i, *batch(i, rank), *val_batch()), compared after each step.",
                '"""',
                "import torch",
                "import torch.nn.functional as F",
                "from torch import nn"]
        if L.ema != "none":
            head.append("from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn")
        if L.wrapper == "ddp":
            head.append("from torch.nn.parallel import DistributedDataParallel as DDP")
        if L.wrapper == "fsdp":
            head.append("from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard")
        head += ["",
                 "import magpy",
                 "",
                 f"magpy.config.background_compile = {L.background}",
                 f"magpy.config.autopilot = {L.autopilot}",
                 f"STEPS = {L.steps}",
                 f"PROCESS_GROUP = {L.process_group}",
                 "",
                 ""]
        if L.model == "lstm":
            head += ["class LSTMNet(nn.Module):",
                     "    def __init__(self, dropout):",
                     "        super().__init__()",
                     "        self.lstm = nn.LSTM(6, 12, batch_first=True)",
                     "        self.drop = nn.Dropout(dropout)",
                     "        self.head = nn.Linear(12, 4)",
                     "",
                     "    def forward(self, x):",
                     "        out, _ = self.lstm(x)",
                     "        return self.head(self.drop(out[:, -1]))",
                     "",
                     ""]
        head += ["def batch(i, rank=0):",
                 "    g = torch.Generator().manual_seed(10_000 * rank + i)",
                 f"    return torch.randn{self.data_shape()[:-1]}, generator=g), {y}",
                 "",
                 "",
                 "def val_batch():",
                 "    g = torch.Generator().manual_seed(999)",
                 f"    return torch.randn{self.data_shape()[:-1]}, generator=g), {y}",
                 "",
                 ""]
        return "\n".join(head + self.build()) + "\n"
