"""The C++ libraries this process's Inductor compiles built or loaded, for a saved program to
carry (magpy.api.persist.kernels).

Inductor loads a CPU graph's kernels from a Python-bindings library (``CppPythonBindingsCodeCache``,
``<key>.main.so``), which its cache entries do not hold.  Other C++ it builds into the same
cache directory before it compiles a graph: the instruction-set probe's test programs for
AVX-512's extensions (VNNI, bf16), which magpy.backends.warm does not cover, and kernels compiled
apart from their wrapper (``optimized.cpp``).  A process that does not find those libraries on
disk builds them again (``VecISA.check_build``; ``codecache._worker_compile_cpp`` checks every
target of a build): seconds that a loaded program must not pay (3 builds on an AVX-512 CPU
before these were carried).  Their names are the hash of their source, which only the call
that writes it knows, so :func:`track` records them as Inductor writes them (``codecache.write``,
called in the compiling process).
"""
from __future__ import annotations

import threading

_sources: set[str] = set()
_lock = threading.Lock()
_tracking = False


def track() -> None:
    """From now on, remember the key of every C++ source Inductor writes (once per process)."""
    global _tracking
    with _lock:
        if _tracking:
            return
        from torch._inductor import codecache
        write = codecache.write

        def tracked(content, extension, *args, **kwargs):
            key, path = write(content, extension, *args, **kwargs)
            if extension.endswith("cpp"):
                _sources.add(key)
            return key, path
        codecache.write = tracked
        _tracking = True


def keys() -> list[str]:
    """The keys of the C++ libraries this process's compiles built or loaded."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache
    return sorted({*CppPythonBindingsCodeCache.cache, *_sources})
