"""Operator graphs as data: a record's ``torch.fx.GraphModule`` written node by node and
built again in another process, meta and all.

fx's own pickling writes a graph module's generated code and traces it again when read
(losing every node's ``meta``, and failing on graphs whose code branches); a saved program
needs the graph itself, with what magpy keeps in ``meta`` (the device of a cond's predicate,
the operations that draw random numbers, the outputs' layouts, the modes a graph starts
under, a counted loop's layout) and its placeholders' example values as metadata (the
backend compiles for them).  Each node is ``[op, name, target, args, kwargs, meta]``; targets
are references (operators by name, functions by import path: magpy.api.persist.refs); arguments
are values (magpy.api.persist.values) or other nodes by name.  Submodules (an operator's arms
and bodies) are graphs too; constants are tensors.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx

from magpy.api.persist.refs import Referrer, Resolver
from magpy.api.persist.values import Unsaveable, decode, encode
from magpy.graphs.assertions import CHECK_DEVICE
from magpy.graphs.higher_order import DEVICE, CountedLoop
from magpy.graphs.opgraph import DRAWS, WRITES_OWN
from magpy.records.codegen.source import empty_like_meta, tensor_meta

# The node meta a graph keeps (the rest, fx's and the backends', is made again when compiled).
_NODE_META = (DEVICE, DRAWS, WRITES_OWN, CHECK_DEVICE)
_EXAMPLE = "example_value"


def encode_graph(gm: fx.GraphModule, referrer: Referrer) -> dict:
    """``gm`` as data (module docstring); :class:`Unsaveable` where a part is not."""
    nodes = [[n.op, n.name, _target(n, referrer), _args(n.args, referrer), _args(n.kwargs, referrer),
              _node_meta(n)] for n in gm.graph.nodes]
    children = dict(gm.named_children())
    for name in children:
        if not isinstance(children[name], fx.GraphModule):
            raise Unsaveable(f"the graph holds a {type(children[name]).__qualname__} ({name}), not a graph")
    return {"nodes": nodes,
            "buffers": {name: t.detach().clone() for name, t in gm.named_buffers(recurse=False)},
            "children": {name: encode_graph(sub, referrer) for name, sub in children.items()},
            "meta": [[k, _meta_value(v)] for k, v in gm.meta.items()]}


def decode_graph(data: dict, find: Resolver) -> fx.GraphModule:
    """The graph module :func:`encode_graph` wrote, its references found by ``find``."""
    root = torch.nn.Module()
    for name, t in data["buffers"].items():
        root.register_buffer(name, t)
    for name, sub in data["children"].items():
        root.add_module(name, decode_graph(sub, find))
    graph, env = fx.Graph(), {}
    for op, name, target, args, kwargs, meta in data["nodes"]:
        node = graph.create_node(op, _decode_target(op, target, find), _decode_args(args, env, find),
                                 _decode_args(kwargs, env, find), name=name)
        node.meta.update((k, _decode_node_meta(k, v)) for k, v in meta)
        env[name] = node
    gm = fx.GraphModule(root, graph)
    for k, v in data["meta"]:
        gm.meta[k] = _decode_meta_value(v)
    return gm


def example_inputs(gm: fx.GraphModule) -> list:
    """The values the graph of a loaded record is compiled for (its placeholders')."""
    return [n.meta[_EXAMPLE] for n in gm.graph.nodes if n.op == "placeholder"]


def _target(node: fx.Node, referrer: Referrer):
    if node.op == "call_function":
        return referrer.refer(node.target)
    return node.target   # a method's or attribute's name


def _decode_target(op: str, target, find: Resolver):
    return find(target) if op == "call_function" else target


def _args(a, referrer: Referrer):
    """Arguments as data: nodes by name, values by value, other objects by reference."""
    if isinstance(a, fx.Node):
        return ["node", a.name]
    if isinstance(a, (tuple, list)) and type(a) is not torch.Size:   # (fx's immutable_list too)
        return ["tuple" if isinstance(a, tuple) else "list", *(_args(x, referrer) for x in a)]
    if isinstance(a, dict):
        return ["dict", *([k, _args(v, referrer)] for k, v in a.items())]
    try:
        return ["value", encode(a)]
    except Unsaveable:
        return ["ref", referrer.refer(a)]


def _decode_args(d, env: dict, find: Resolver):
    tag, rest = d[0], d[1:]
    if tag == "node":
        return env[rest[0]]
    if tag in ("tuple", "list"):
        items = [_decode_args(x, env, find) for x in rest]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return {k: _decode_args(v, env, find) for k, v in rest}
    if tag == "value":
        return decode(rest[0])
    return find(rest[0])


def _node_meta(node: fx.Node) -> list:
    meta = [[k, encode(node.meta[k])] for k in _NODE_META if k in node.meta]
    if node.op == "placeholder" and _EXAMPLE in node.meta:
        v = node.meta[_EXAMPLE]
        if isinstance(v, torch.Tensor):
            if type(v) not in (torch.Tensor, torch.nn.Parameter):   # (a fake tensor: symbolic sizes)
                raise Unsaveable(f"a graph input is a {type(v).__qualname__}")
            meta.append([_EXAMPLE, ["tensor", tensor_meta(v)]])
        else:
            meta.append([_EXAMPLE, ["value", encode(v)]])
    return meta


def _decode_node_meta(key: str, d):
    """A node's meta value :func:`_node_meta` wrote (an example tensor: one of its kind)."""
    if key != _EXAMPLE:
        return decode(d)
    return empty_like_meta(d[1]) if d[0] == "tensor" else decode(d[1])


def _meta_value(v):
    if type(v) is CountedLoop:
        return ["counted", encode(dataclasses.astuple(v))]
    return ["value", encode(v)]


def _decode_meta_value(d):
    return CountedLoop(*decode(d[1])) if d[0] == "counted" else decode(d[1])
