"""The reference graph (paper §4.1, §5.3): what the program reached from outside, how, and
what it changed.  ``graph`` holds the structure and Algorithm 1; ``rules`` updates it from
the monitor's execution states, through ``reads``, ``attributes``, ``stores``, ``natives`` and
``unseen``; ``breaker`` collects the dynamic operations they detect."""
from magpy.capture.refgraph.breaker import Breaker
from magpy.capture.refgraph.graph import Kind, RefGraph, ShadowNode, ShadowVersion
from magpy.capture.refgraph.rules import RefGraphBuilder

__all__ = ["RefGraph", "ShadowNode", "ShadowVersion", "Kind", "RefGraphBuilder", "Breaker"]
