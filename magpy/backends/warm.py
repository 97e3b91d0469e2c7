"""Warm start: what a new process need not find out again before it compiles.

Inductor's on-disk caches (FX graph cache, AOTAutograd cache) let a second process load
the code the first one compiled, but before it looks there, every process probes which
vector instruction sets the C++ compiler can build for and the process can load: it
compiles a test program per instruction set (cached on disk) and then starts a Python
child per instruction set to ``dlopen`` it (``cpu_vec_isa.VecISA.check_build``), about a
second per process here, often more than the whole cached load.

magpy keeps the probe's answer beside Inductor's caches, keyed by everything it depends
on (torch, the Python executable, the CPU's instruction sets, the C++ compiler).  When the
probe found every candidate usable, magpy's compiles say so through Inductor's own switch
(``cpp.vec_isa_ok = True``), in the first process as in later ones, so both hash their
graphs alike.  When some candidate failed, nothing is patched and Inductor probes as usual.
The switch covers the base probe of each set; the extra ones of AVX-512 (bf16, VNNI) still
run in every process (half of the probes; BERT's warm start 2.7 -> 1.9 s).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys

import torch

_FILE = "vec_isa.json"


def inductor_patch() -> dict:
    """The Inductor config patch that skips the instruction-set probe, or ``{}`` (a probe
    failed, or the user set ``cpp.vec_isa_ok`` themselves)."""
    from torch._inductor import config
    if config.cpp.vec_isa_ok is not None:
        return {}
    path, key = _location()
    known = _read(path)
    if key not in known:
        known[key] = _probe()
        _write(path, known)
    return {"cpp.vec_isa_ok": True} if known[key] else {}


def _probe() -> bool:
    """Whether every instruction set this x86 CPU has passed Inductor's probe (this process
    probes now, once: Inductor keeps the answer for the process).  Other machines: False."""
    from torch._inductor import cpu_vec_isa
    try:
        flags = cpu_vec_isa.x86_isa_checker()
        # What Inductor takes without probing (cpp.vec_isa_ok): the sets whose flags the CPU has.
        unprobed = [str(isa) for isa in cpu_vec_isa.supported_vec_isa_list
                    if all(flag in flags for flag in str(isa).split())]
        return bool(flags) and [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()] == unprobed
    except Exception:  # noqa: BLE001 - another torch's internals: let Inductor probe
        return False


def _location() -> tuple[str, str]:
    """The file that keeps the answers, and this process's key in it."""
    from torch._inductor import cpp_builder, cpu_vec_isa
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    facts = [torch.__version__, sys.executable, platform.machine(),
             cpu_vec_isa.x86_isa_checker(), cpp_builder.get_cpp_compiler()]
    key = hashlib.sha256(repr(facts).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), "magpy", _FILE), key


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            known = json.load(f)
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _write(path: str, known: dict) -> None:
    """Write atomically: processes starting together may both probe and write."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(known, f)
        os.replace(tmp, path)
    except OSError:
        pass   # a read-only cache: probe again next time


def answers() -> dict:
    """The probe's answers this machine keeps, by key (a saved program carries them to the
    machine that loads it: magpy.api.persist)."""
    return _read(_location()[0])


def adopt(answers: dict) -> None:
    """Keep another machine's ``answers`` beside this one's own: a key is this process's only
    where everything the probe depends on is the same, so a foreign answer is never used."""
    path = _location()[0]
    known = _read(path)
    merged = {**answers, **known}
    if merged != known:
        _write(path, merged)
