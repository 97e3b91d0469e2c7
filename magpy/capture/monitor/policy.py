"""The call policy: for each callee, is it entered, run natively, or an intrinsic?

It is a table, not code: later layers (annotations) add entries.  Lookups are by object
identity; the table keeps its callees alive so identities stay unique.
"""
from typing import Callable


class CallPolicy:
    """Which callees the monitor enters, runs natively, or handles with an intrinsic.

    By default a Python function is entered (monitored as a new frame) and anything else
    runs natively.  ``run_natively(fn)`` keeps a Python function out of the monitor;
    intrinsics replace a native callee whose behaviour depends on its caller's frame or
    that calls back into Python.
    """

    def __init__(self):
        self.native: dict = {}
        # Optional ``module name -> bool``: whole libraries whose Python code runs natively.
        self.native_module: Callable[[str], bool] | None = None
        self.intrinsics: dict = {}
        self.method_intrinsics: dict = {}
        self.substitutes: dict = {}      # callable type -> instance -> what to call instead
        self.aliases: dict = {}          # id(callee) -> what to call instead
        self.reroutes: dict = {}         # id(callee) -> (caller, args, kwargs) -> function to enter or None
        self.method_reroutes: dict = {}  # builtin method name -> (owner type, choose), as reroutes
        self._keep: list = []

    def run_natively(self, fn: Callable) -> None:
        """Never enter ``fn``: run it natively and report it as a native call."""
        self.native[id(fn)] = fn

    def runs_natively(self, fn: Callable) -> bool:
        """Is the Python function ``fn`` kept out of the monitor?"""
        rule = self.native_module
        # exec() in a namespace without __name__ makes functions whose __module__ is None.
        return id(fn) in self.native or (rule is not None and rule(fn.__module__ or ""))

    def add_intrinsic(self, callee: Callable, handler: Callable) -> None:
        """Handle calls of ``callee`` with ``handler(monitor, args, kwargs)``."""
        self.intrinsics[id(callee)] = handler
        self._keep.append(callee)

    def add_method_intrinsic(self, owner: type, name: str, handler: Callable) -> None:
        """Handle calls of the builtin method ``owner.name`` bound to any instance."""
        self.method_intrinsics[name] = (owner, handler)

    def substitute(self, tp: type, replacement: Callable) -> None:
        """Calls of instances of ``tp`` are calls of ``replacement(instance, calling frame)``
        (e.g. a ``torch.jit.script``ed function runs its original Python); None: call it as it is."""
        self.substitutes[tp] = replacement

    def alias(self, callee: Callable, target: Callable) -> None:
        """Calls of ``callee`` are calls of ``target``: a wrapper that only forwards to it
        (``torch._disable_dynamo``'s) is looked through, so the monitor follows ``target``."""
        self.aliases[id(callee)] = target
        self._keep.append(callee)

    def reroute(self, callee: Callable, choose: Callable) -> None:
        """A call of ``callee`` for which ``choose(calling frame, args, kwargs)`` gives a Python
        function enters that function instead, as if the program had called it (a stand-in
        doing the builtin's work in monitored code, ``magpy.capture.callees.builtin_standins``); None: call
        ``callee``."""
        self.reroutes[id(callee)] = choose
        self._keep.append(callee)

    def enters(self, callee, fn) -> bool:
        """Does a call of ``callee`` (or of a method bound to it) always enter Python function
        ``fn``, a stand-in it is rerouted to (a ``choose`` that names it as ``stand_in``)?"""
        choose = self.reroutes.get(id(getattr(callee, "__func__", callee)))
        return choose is not None and getattr(choose, "stand_in", None) is fn

    def reroute_method(self, owner: type, name: str, choose: Callable) -> None:
        """:meth:`reroute` for the builtin method ``owner.name`` bound to any instance
        (``choose`` gets the instance as its first argument)."""
        self.method_reroutes[name] = (owner, choose)

    def copy(self) -> "CallPolicy":
        """An independent policy starting from this one's entries."""
        new = CallPolicy()
        new.native = dict(self.native)
        new.native_module = self.native_module
        new.intrinsics = dict(self.intrinsics)
        new.method_intrinsics = dict(self.method_intrinsics)
        new.substitutes = dict(self.substitutes)
        new.aliases = dict(self.aliases)
        new.reroutes = dict(self.reroutes)
        new.method_reroutes = dict(self.method_reroutes)
        new._keep = list(self._keep)
        return new
