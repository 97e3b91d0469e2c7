"""The backend's compiled code, carried in a saved program so that a process on a machine
whose Inductor cache directory is empty loads it instead of compiling it.

Inductor keeps what it compiled in on-disk caches: the AOTAutograd and FX graph cache
entries (torch's "mega-cache": ``torch.compiler.save_cache_artifacts`` gives those this
process wrote or read, ``load_cache_artifacts`` puts them in another's cache directory) and
the C++ kernels those entries load, shared libraries named by the hash of their source
(the wrappers and the kernels compiled apart from them: magpy.backends.kernel_libraries),
which the entries do not hold (a cache hit without them runs the C++ compiler again:
seconds per graph).  A saved program carries all three, and the instruction-set probe's
answers (magpy.backends.warm), so that compiling its graphs again in the loading process finds every
piece in place.  Nothing here changes what runs: Inductor keys every entry by what it was
made from, and a key that does not match in the loading process (another torch, another
CPU) is a miss that compiles as usual.
"""
from __future__ import annotations

import os

import torch

from magpy.backends import kernel_libraries, warm


def collect() -> dict:
    """This process's compiled artifacts (module docstring), as data."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    saved = torch.compiler.save_cache_artifacts()
    root = cache_dir()
    files = {}
    for key in kernel_libraries.keys():
        folder = os.path.join(root, key[1:3])
        for name in _names(folder, key):
            with open(os.path.join(folder, name), "rb") as f:
                files[f"{key[1:3]}/{name}"] = _bytes_tensor(f.read())
    return {"caches": _bytes_tensor(saved[0] if saved else b""), "files": files, "probe": warm.answers()}


def install(artifacts: dict) -> None:
    """Put ``artifacts`` (:func:`collect`'s, of another process) where this process's
    Inductor looks; files already there are left as they are."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    root = cache_dir()
    for rel, data in artifacts["files"].items():
        path = os.path.join(root, *rel.split("/"))
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data.numpy().tobytes())
            os.replace(tmp, path)
    caches = artifacts["caches"].numpy().tobytes()
    if caches:
        torch.compiler.load_cache_artifacts(caches)
    warm.adopt(artifacts["probe"])


def _names(folder: str, key: str) -> list[str]:
    """A kernel's files: its shared library and source (not the locks beside them)."""
    try:
        return sorted(n for n in os.listdir(folder) if n.startswith(key) and not n.endswith(".tmp"))
    except OSError:
        return []


def _bytes_tensor(b: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)
