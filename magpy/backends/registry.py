"""Backends: graph compilers that turn a recorded ``torch.fx.GraphModule`` into a callable.

A backend is ``(gm, example_inputs) -> callable``; the callable takes the graph inputs
positionally and returns the graph outputs as a sequence.  magpy's own names are "eager",
"inductor", "torchscript" and "onnxrt"; any other name that ``torch.compile`` knows
(``torch._dynamo.list_backends(exclude_tags=())``, e.g. "aot_eager") is looked up there.
"""
from __future__ import annotations

import contextlib
import difflib
import importlib.util
import io
import logging
import warnings
from typing import Callable

import torch
from torch._guards import TracingContext, detect_fake_mode, tracing
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from magpy.backends import kernel_libraries, loop_gradients, warm
from magpy.backends.eager_twins import eager_twin
from magpy.errors import BackendError
from magpy.graphs.opgraph import GRAD_OUTPUTS, storage_id
from magpy.training import backward, fused_steps, train_steps

Backend = Callable[[torch.fx.GraphModule, list], Callable]


def _eager(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    return eager_twin(gm).forward


_CONTROL_FLOW = (torch.ops.higher_order.cond, torch.ops.higher_order.while_loop)


def eager_gradients_only(gm: torch.fx.GraphModule, backend: str) -> bool:
    """Must ``gm``, compiled by ``backend``, run as backend "eager" runs it
    (magpy.backends.loop_gradients)?"""
    return loop_gradients.eager_gradients_only(gm, backend, _op_names(gm))


def _inductor(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    if not _loops_anchored(gm, example_inputs):
        return _eager(gm, example_inputs)
    train_steps.tensor_alphas(gm)
    train_steps.tensor_scalar_lists(gm)
    fused_steps.fused_as_tensor_ops(gm)
    if not backward.has_backward(gm):
        return _compile_inductor(gm, example_inputs)
    # A whole train step (magpy.training.backward): compiled as one inference graph, traced with grad
    # on (its forward must record the autograd graph its backward differentiates).
    needing_grad = gm.meta[GRAD_OUTPUTS]
    examples = backward.inference_form(gm, example_inputs)
    backward.channels_last_images(gm, examples)
    with torch.enable_grad():
        compiled = _compile_inductor(gm, examples)
    return backward.BackwardDone(compiled, needing_grad) if needing_grad else compiled


def _loops_anchored(gm: torch.fx.GraphModule, example_inputs: list) -> bool:
    """:func:`loop_gradients.anchor_carries` on fake twins of ``example_inputs``; False where
    a loop's carries cannot be anchored, or the graph cannot run on fakes to tell."""
    if not loop_gradients.loops_under_autograd(gm):
        return True
    mode = _fake_mode(example_inputs)
    symbolic = detect_fake_mode(example_inputs) is not None
    fakes = example_inputs if symbolic else _static_fakes(example_inputs, mode)
    try:
        return loop_gradients.anchor_carries(gm, fakes, mode)
    except Exception:  # noqa: BLE001 - a data-dependent operation fakes cannot run
        return False


def _compile_inductor(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    with _quiet(categories=(DeprecationWarning,)):   # inductor's imports use deprecated torch.jit APIs
        from torch._functorch import config as functorch_config
        from torch._inductor import config as inductor_config
        from torch._inductor.compile_fx import compile_fx
    kernel_libraries.track()
    mode = _fake_mode(example_inputs)
    static = detect_fake_mode(example_inputs) is None   # (inside tracing() it finds the context's mode)
    given = []
    try:
        with tracing(TracingContext(mode)):
            fakes = _static_fakes(example_inputs, mode) if static else example_inputs
            given, effects = _example_values(gm, fakes, mode)
            given += _fold_constants(gm, effects)
            given += _whole_input_pools(gm)
            options, patch = _inductor_options(gm, fakes)
            with inductor_config.patch(patch), functorch_config.patch(loop_gradients.functorch_patch(gm)):
                return compile_fx(gm, fakes, **options)
    except Exception:
        if not static:
            raise
        # Its own shape environment lets inductor's passes make Python scalars symbolic,
        # which some graphs fail on (AdamW's update: KeyError in _tensorify_python_scalars):
        # compile as before, without the disk caches.
        for node in given:
            del node.meta["example_value"]
        options, patch = _inductor_options(gm, example_inputs)
        with inductor_config.patch(patch), functorch_config.patch(loop_gradients.functorch_patch(gm)):
            return compile_fx(gm, example_inputs, **options)


def _inductor_options(gm: torch.fx.GraphModule, example_inputs: list) -> tuple[dict, dict]:
    """``compile_fx``'s keyword arguments and the inductor config patch for ``gm``."""
    from torch._inductor.decomposition import select_decomp_table
    # The instruction-set probe is for C++ kernels: a graph of GPU tensors has none, and on a
    # GPU machine the probe's Python children (each importing torch) cost ~50 s cold.
    # Random operations call eager's kernels, which draw eager's numbers from the program's
    # generators (Inductor's own kernels draw other numbers, and drop unused draws): magpy.graphs.rng.
    options = {}
    patch = {**(warm.inductor_patch() if _cpu_kernels(example_inputs) else {}), "fallback_random": True}
    names = _op_names(gm)
    if not names.isdisjoint(_ROUNDING):
        # A rounding (fake quantization) turns a last-bit difference before it into a whole
        # step.  Inductor's channels-last convolutions and its decomposed BatchNorm sum in
        # another order than eager's kernels; kept in eager's layout and as eager's kernel,
        # they give eager's exact values.
        patch["layout_optimization"] = False
        if any("batch_norm" in name or name in _REACHES_BATCH_NORM for name in names):
            # Only then: a decomposition table of magpy's own makes Inductor bypass its FX
            # graph cache (it cannot key the table's OpOverloads; torch 2.13), so a graph
            # that merely rounds would compile again in every process.
            options["decompositions"] = {op: fn for op, fn in select_decomp_table().items()
                                         if "batch_norm" not in op.name()}
    if any(n.target in _CONTROL_FLOW for n in gm.graph.nodes):
        # Inductor hands a cond's branches channels-last activations that the compiled branch
        # then asserts to be contiguous (torch 2.13; torch.compile fails the same way).
        patch["layout_optimization"] = False
    return options, patch


def _cpu_kernels(example_inputs: list) -> bool:
    """May Inductor write C++ kernels for a graph of these inputs: unless every tensor input
    is on another device (a graph with no tensor input makes its tensors on the CPU)."""
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    return not devices or "cpu" in devices


def _static_fakes(example_inputs: list, mode) -> list:
    """The fake tensors of a record that fixes its sizes: every size a number, as the guard
    checked them.  Handed real tensors in a mode with a shape environment, AOTAutograd makes
    every size of every input a symbol (its ``process_inputs``), and Inductor compiles
    kernels for any size, compiled for longer (ResNet-101 here: 32 s, 19 s with fixed sizes)."""
    return [mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x
            for x in example_inputs]


def _example_values(gm: torch.fx.GraphModule, example_inputs: list, mode) -> tuple[list, _Effects | None]:
    """Give each operation node the fake value Dynamo's nodes carry (``meta["example_value"]``):
    AOTAutograd's on-disk cache only takes graphs whose method calls are on nodes known to be
    tensors that way.  A graph fake tensors cannot run (a data-dependent operation) keeps
    its nodes as they are: it is then compiled again in each process, nothing worse.  The
    nodes given a value, and the operations' effects seen on the way (None if it failed)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    effects = _Effects()

    class Propagation(FakeTensorProp):
        def run_node(self, n):
            effects.node = n
            with effects:
                return super().run_node(n)

    try:
        # The graph may switch grad or inference mode: leave both as they were.
        with torch.autograd.set_grad_enabled(torch.is_grad_enabled()), \
                torch.inference_mode(torch.is_inference_mode_enabled()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Propagation(gm, mode).propagate(*example_inputs)
    except Exception:  # noqa: BLE001 - see the docstring
        return [], None
    given = [n for n in gm.graph.nodes if n.op != "placeholder" and "val" in n.meta
             and "example_value" not in n.meta]
    for node in given:
        node.meta["example_value"] = node.meta["val"]
    return given, effects


class _Effects(TorchDispatchMode):
    """What the operations of a graph do besides making their results, as seen while fake
    tensors run them: which storages they write (in place, ``out=``, through a view) and
    which draw random numbers.  ``node`` is the operation running."""

    supports_higher_order_operators = True   # conds pass through whole (their branches write nothing)

    def __init__(self):
        super().__init__()
        self.node: torch.fx.Node | None = None
        self.written: set[int] = set()              # storages (opgraph.storage_id) some operation writes
        self.writers: set[torch.fx.Node] = set()
        self.random: set[torch.fx.Node] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.OpOverload):
            if torch.Tag.nondeterministic_seeded in func.tags:
                self.random.add(self.node)
            for i, arg in enumerate(func._schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    value = args[i] if i < len(args) else kwargs.get(arg.name)
                    for t in pytree.tree_leaves(value):
                        if isinstance(t, torch.Tensor):
                            self.written.add(storage_id(t))
                            self.writers.add(self.node)
        return func(*args, **kwargs)


def _fold_constants(gm: torch.fx.GraphModule, effects: _Effects | None) -> list[torch.fx.Node]:
    """Compute once, here, the tensors of ``gm`` that depend on no graph input, and make them
    constants of the graph; the new ``get_attr`` nodes.

    They depend only on what the record's guard fixes (sizes, Python values), so they are
    the same in every call: DeBERTa's log-bucketed relative positions are made from
    ``arange`` alone.  Inductor does not fold such tensors (it folds no subgraph that starts
    at a constructor) and recomputes them inside every kernel that reads them: the bucket
    arithmetic (a ``log`` and a ``ceil`` per element) ran for every head, query and key of
    both gathers in every layer, which made the compiled DeBERTa slower than eager.

    A tensor is only folded where that cannot change a result: no operation writes its
    storage (nor a view's), no graph output shares it (the program could write it), nothing
    on its way draws random numbers or needs grad.  Tensors that are just made or viewed
    (``zeros``, ``arange(n)[:, None]``) stay: Inductor writes them inline for free, and a
    constant would only cost memory.  A graph fake tensors could not run is left alone."""
    if effects is None:
        return []
    graph = gm.graph
    kept = set(effects.written)   # storages the graph writes or hands out: never constant
    for node in pytree.tree_leaves(graph.output_node().args):
        if isinstance(node, torch.fx.Node):
            kept.update(storage_id(t) for t in _tensors(node))
    constant, computes = set(), {}
    for node in graph.nodes:
        if node.op == "get_attr":
            ok = isinstance(node.meta.get("val"), torch.Tensor)
        elif node.op in ("call_function", "call_method"):
            ok = (bool(node.users) and node not in effects.random and node not in effects.writers
                  and all(a in constant for a in node.all_input_nodes))
        else:
            ok = False
        if not ok or any(t.requires_grad or storage_id(t) in kept for t in _tensors(node)):
            continue
        constant.add(node)
        # Does it compute something (a result in storage of its own, not a view of its inputs)?
        made = {storage_id(t) for a in node.all_input_nodes for t in _tensors(a)}
        own = bool(node.all_input_nodes) and any(storage_id(t) not in made for t in _tensors(node))
        computes[node] = own or any(computes[a] for a in node.all_input_nodes)
    folded = [n for n in graph.nodes if n in constant and computes[n]
              and isinstance(n.meta.get("val"), torch.Tensor) and any(u not in constant for u in n.users)]
    if not folded:
        return []
    needed = set()
    stack = list(folded)
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(node.all_input_nodes)
    run = torch.fx.Interpreter(gm)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for node in graph.nodes:
                if node in needed:
                    run.env[node] = run.run_node(node)
    except Exception:  # noqa: BLE001 - an operation that fails here stays in the graph, as it was
        return []
    attrs = []
    for node in folded:
        name = f"_folded{len(attrs)}"
        while hasattr(gm, name):
            name += "_"
        gm.register_buffer(name, run.env[node])
        with graph.inserting_before(node):
            attr = graph.get_attr(name)
        attr.meta.update({k: node.meta[k] for k in ("val", "example_value") if k in node.meta})
        node.replace_all_uses_with(attr)
        attrs.append(attr)
    for node in reversed(list(graph.nodes)):
        if node in constant and not node.users:
            graph.erase_node(node)
    gm.recompile()
    return [a for a in attrs if "example_value" in a.meta]


# Average pools by name -> their spatial dimensions, and their parameters in order.
_AVG_POOLS = {"avg_pool1d": 1, "avg_pool2d": 2, "avg_pool3d": 3}
_AVG_POOL_PARAMETERS = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                        "divisor_override")


def _whole_input_pools(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """Write average pools whose one window covers the whole unpadded input as the mean they
    are; the new nodes.  Inductor's lowering of a pool whose window is its stride loops over
    the whole window, masking out what lies beyond the input (torch 2.13): ALIGN's image
    pooler, ``nn.AvgPool2d(2560, ceil_mode=True)`` on a 9x9 map, took 2560 x 2560 steps per
    channel, 1.2 s where eager's kernel takes 0.1 ms.  With no padding and a window at least
    the input's size there is one output per plane, the mean of the plane, whatever
    ``ceil_mode`` and ``count_include_pad`` say.  Needs the fake values (``meta["val"]``)
    with numbers for sizes (a record that fixes them)."""
    means = []
    for node in list(gm.graph.nodes):
        dims = _AVG_POOLS.get(getattr(node.target, "__name__", None)) if node.op == "call_function" else None
        if dims is None or "val" not in node.meta:
            continue
        bound = dict(zip(_AVG_POOL_PARAMETERS, node.args), **node.kwargs)
        x = bound["input"]
        size = x.meta.get("val").shape[-dims:] if isinstance(x, torch.fx.Node) and "val" in x.meta else None
        kernel, padding = (_per_dim(bound.get(k, 0), dims) for k in ("kernel_size", "padding"))
        covers = size is not None and all(isinstance(k, int) and isinstance(n, int) and k >= n
                                          for k, n in zip(kernel, size))
        if not covers or bound.get("divisor_override") is not None or any(padding):
            continue
        with gm.graph.inserting_before(node):
            mean = gm.graph.call_function(torch.mean, (x,), {"dim": tuple(range(-dims, 0)), "keepdim": True})
        mean.meta.update({k: node.meta[k] for k in ("val", "example_value") if k in node.meta})
        node.replace_all_uses_with(mean)
        gm.graph.erase_node(node)
        means.append(mean)
    if means:
        gm.recompile()
    return [m for m in means if "example_value" in m.meta]


def _per_dim(value, dims: int) -> tuple:
    """A pooling parameter (an int or one per dimension) as one per dimension."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * dims


def _tensors(node: torch.fx.Node) -> list[torch.Tensor]:
    """The tensors of ``node``'s fake value."""
    return [t for t in pytree.tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor)]


def _fake_mode(example_inputs: list):
    """The fake mode to compile in: that of fake tensors with symbolic sizes (magpy.graphs.dynamic),
    else one with a shape environment of its own.  Inductor's on-disk FX graph cache bypasses
    every graph compiled without a shape environment (its cache entries keep their shape
    guards there), so a new process would compile again."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    mode = detect_fake_mode(example_inputs)
    return mode if mode is not None else FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())


# Backends that compile graphs for symbolic sizes (fake tensor example inputs).
SYMBOLIC = frozenset({"eager", "inductor"})
# Backends that cannot compile torch.cond or torch.while_loop: an if or a while on tensor
# data stays a break for them.
NO_CONDS = frozenset({"torchscript", "onnxrt"})
# Backends that compile on fake tensors only: compiling runs none of the graph's random
# operations (torch.jit.trace, a user's backend may run them), so it may run in the background
# beside the program's own draws (magpy.graphs.rng).
DRAWS_NOTHING = frozenset({"inductor"})


class EagerLayout:
    """A compiled graph whose outputs that eager made contiguous are contiguous again.
    Inductor may return another layout than the one its own fake tensors promised (``torch.cat``
    of an empty cache and a transposed projection gives the projection's strides): a program
    that ``view``s the result would fail where eager does not, and a KV cache with other
    strides misses its next record.  Which outputs need it is learnt on the first call (the
    compiled code fixes its layouts); the rest cost nothing."""

    __slots__ = ("fn", "contiguous", "fix")

    def __init__(self, fn: Callable, contiguous: tuple[int, ...]):
        self.fn, self.contiguous, self.fix = fn, contiguous, None

    def __call__(self, *args):
        out = self.fn(*args)
        fix = self.fix
        if fix is None:
            fix = self.fix = tuple(i for i in self.contiguous if not out[i].is_contiguous())
        if fix:
            out = list(out)
            for i in fix:
                out[i] = out[i].contiguous()
        return out


# Operations whose result jumps where their input crosses a boundary.
_ROUNDING = frozenset({"round", "floor", "ceil", "trunc", "floor_divide", "remainder", "fmod", "sign",
                       "__floordiv__", "__mod__"})


# Operations that reach ATen's batch norm without saying so: instance norm is computed by
# it, and a custom autograd Function's forward (recorded whole as its ``apply``) may use it.
_REACHES_BATCH_NORM = frozenset({"instance_norm", "apply"})


def _op_names(gm: torch.fx.GraphModule) -> set[str]:
    """The names of the operations of ``gm`` and of its conds' branches."""
    return {n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
            for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes if n.op in ("call_function", "call_method")}


def _torchscript(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """Scripted (traced if scripting fails) and, for graphs recorded without grad, frozen."""
    with _quiet():   # TorchScript's deprecation notices are about magpy's choice, not the user's code
        try:
            module = torch.jit.script(gm)
        except Exception:  # noqa: BLE001 - fx code TorchScript cannot compile: trace it instead
            if any(n.target is torch._C._set_grad_enabled for n in gm.graph.nodes):
                raise BackendError("torchscript: the graph switches grad mode, which tracing cannot keep, "
                                   "and it could not be scripted") from None
            with torch.no_grad():
                module = torch.jit.trace(gm, tuple(example_inputs), check_trace=False)
        if not torch.is_grad_enabled():
            # The record's guard pins grad mode, so this graph only ever runs without grad.
            module = torch.jit.freeze(module.eval())
    return module


def _onnxrt(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """Exported to ONNX (torch.onnx, dynamo exporter) and run by ONNX Runtime on the CPU."""
    import onnxruntime

    needs_grad = any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
    if torch.is_grad_enabled() and needs_grad:
        raise BackendError("onnxrt runs inference only; this graph needs autograd "
                           "(use it under torch.no_grad(), or another backend)")
    buffer = io.BytesIO()
    with _quiet(logging.getLogger("torch.onnx")):
        program = torch.onnx.export(gm.eval(), tuple(example_inputs), dynamo=True, external_data=False,
                                    verbose=False)
    program.save(buffer)
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(example_inputs):
        raise BackendError(f"onnxrt: the exported model has {len(names)} inputs, the graph "
                           f"{len(example_inputs)} (inputs that are not tensors are not supported)")
    run = session.run

    def call(*inputs):
        outs = run(None, {n: t.detach().numpy() for n, t in zip(names, inputs)})
        return tuple(torch.from_numpy(o) for o in outs)

    return call


@contextlib.contextmanager
def _quiet(logger: logging.Logger | None = None,
           categories: tuple = (DeprecationWarning, UserWarning, FutureWarning)):
    # The exporters' and TorchScript's notices concern magpy's use of them, not the program.
    level = logger.level if logger is not None else None
    if logger is not None:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category in categories:
                warnings.simplefilter("ignore", category)
            yield
    finally:
        if logger is not None:
            logger.setLevel(level)


BACKENDS: dict[str, Backend] = {"eager": _eager, "inductor": _inductor, "torchscript": _torchscript,
                                "onnxrt": _onnxrt}

# Backends that need packages magpy does not depend on: name -> (modules, install command).
# torch registers some whose packages it does not depend on either.
OPTIONAL: dict[str, tuple[tuple[str, ...], str]] = {
    "onnxrt": (("onnxruntime", "onnxscript", "onnx"), "pip install 'magpy[onnxrt]'"),
    "tvm": (("tvm",), "install Apache TVM (https://tvm.apache.org)"),
    "openxla": (("torch_xla",), "pip install torch_xla (a build matching your torch)"),
    "openxla_eval": (("torch_xla",), "pip install torch_xla (a build matching your torch)"),
}
# Backends that cannot run on this machine whatever is installed.
UNUSABLE: dict[str, tuple[Callable[[], bool], str]] = {
    "cudagraphs": (lambda: not torch.cuda.is_available(), "it needs a CUDA device, and torch sees none"),
}


def torch_backends() -> list[str]:
    """The backend names ``torch.compile`` knows (its registry, debug ones included)."""
    import torch._dynamo
    return torch._dynamo.list_backends(exclude_tags=())


def available() -> list[str]:
    """The backend names :func:`resolve` accepts on this machine (torch's test-only ones left out)."""
    names = list(BACKENDS) + [name for name in torch_backends() if name not in BACKENDS
                              and "TESTING_ONLY" not in name and "minifier" not in name]
    return [name for name in names if _unusable(name) is None]


def _missing(name: str) -> list[str]:
    modules, _ = OPTIONAL.get(name, ((), ""))
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _unusable(name: str) -> str | None:
    """Why backend ``name`` cannot run here (a missing package, no device), or None."""
    missing = _missing(name)
    if missing:
        return f"it needs {', '.join(missing)}, which is not installed: {OPTIONAL[name][1]}"
    check = UNUSABLE.get(name)
    return check[1] if check is not None and check[0]() else None


def resolve(backend: str | Backend) -> tuple[str, Backend]:
    """``(name, backend callable)`` for a backend name or a user's callable."""
    if callable(backend):
        return getattr(backend, "__name__", type(backend).__name__), backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable (gm, example_inputs) -> callable, "
                        f"not {type(backend).__name__}")
    known = backend in BACKENDS or backend in torch_backends()
    why = _unusable(backend) if known else None
    if why is not None:
        raise BackendError(f"backend {backend!r} cannot run here: {why}")
    fn = BACKENDS.get(backend)
    if fn is not None:
        return backend, fn
    if known:
        from torch._dynamo.backends.registry import lookup_backend
        return backend, lookup_backend(backend)
    names = available()
    close = difflib.get_close_matches(backend.lower(), names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise BackendError(f"unknown backend {backend!r}.{hint} Available: {', '.join(names)}, "
                       "or any callable (gm, example_inputs) -> callable")
