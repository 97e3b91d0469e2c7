"""The file of a saved program: what it was made with, then what it holds, checked whole.

Layout: a magic line; the header's length (8 bytes, big-endian); the header, JSON (format
version, what the program was made with: :func:`made_with`, and the payload's length); the
payload; the SHA-256 of all that (32 bytes).  Reading checks
the magic, the hash (a file changed on disk, header included, or truncated), the header and
the length before it reads the payload; each failure is a :class:`~magpy.errors.LoadError`
that says which.  The payload is JSON then the tensors it holds, written by ``torch.save``
and read by ``torch.load(weights_only=True)``: reading a file builds plain data and tensors
only (magpy.api.persist.values).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import sys

import torch

from magpy.errors import LoadError

MAGIC = b"MAGPY SAVED PROGRAM\n"
FORMAT = 1
_DIGEST = 32   # bytes of SHA-256


def made_with(backend: str, fullgraph: bool, program: list) -> dict:
    """What a program saved in this process was made with; ``program``: the fingerprints of
    the objects the compiled callable holds (magpy.api.persist.refs)."""
    from magpy import __version__
    made = {"magpy": __version__, "torch": torch.__version__, "python": "%d.%d" % sys.version_info[:2],
            "machine": f"{sys.platform} {platform.machine()}", "backend": backend, "fullgraph": fullgraph,
            "program": program}
    if backend == "inductor":
        from torch._inductor import cpu_vec_isa
        made["cpu"] = sorted(cpu_vec_isa.x86_isa_checker())   # (the kernels' instruction sets)
    return made


def write(path, header: dict, payload: dict) -> None:
    """Write the file (atomically: a reader never sees half of it)."""
    tensors: list = []
    data = json.dumps(_apart(payload, tensors)).encode()
    buf = io.BytesIO()
    torch.save(tensors, buf)
    body = len(data).to_bytes(8, "big") + data + buf.getvalue()
    head = json.dumps({"format": FORMAT, **header, "payload_bytes": len(body)}).encode()
    data = MAGIC + len(head).to_bytes(8, "big") + head + body
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data + hashlib.sha256(data).digest())
    os.replace(tmp, path)


def read(path) -> tuple[dict, bytes]:
    """The header and the (checked, unread) payload of the file at ``path``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LoadError(f"cannot read {path}: {e}") from None
    if not data.startswith(MAGIC):
        raise LoadError(f"{path} is not a program magpy.save wrote (no magpy header)")
    data, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(data).digest() != digest:
        raise LoadError(f"{path} was changed after magpy.save wrote it, or is cut short (its SHA-256 "
                        "differs from the one it was written with)")
    at = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC):at], "big")
    try:
        header = json.loads(data[at:at + size])
    except ValueError:
        raise LoadError(f"{path} is damaged: its header does not read") from None
    if header.get("format") != FORMAT:
        raise LoadError(f"{path} is in file format {header.get('format')!r}; this magpy reads "
                        f"format {FORMAT}")
    body = data[at + size:]
    if len(body) != header.get("payload_bytes"):
        raise LoadError(f"{path} is damaged: {len(body)} bytes of content where it was written with "
                        f"{header.get('payload_bytes')}")
    return header, body


def payload(body: bytes) -> dict:
    """The payload of a file :func:`read` checked."""
    size = int.from_bytes(body[:8], "big")
    tensors = torch.load(io.BytesIO(body[8 + size:]), weights_only=True)
    return _together(json.loads(body[8:8 + size]), tensors)


# The payload is JSON (read by a C parser: a record is thousands of small lists, which the
# weights-only unpickler reads a hundred times slower) with its tensors apart, each in its
# place as {"$tensor": i}.
def _apart(v, tensors: list):
    if isinstance(v, torch.Tensor):
        tensors.append(v)
        return {"$tensor": len(tensors) - 1}
    if isinstance(v, dict):
        return {k: _apart(x, tensors) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_apart(x, tensors) for x in v]
    return v


def _together(v, tensors: list):
    if isinstance(v, dict):
        if v.keys() == {"$tensor"}:
            return tensors[v["$tensor"]]
        return {k: _together(x, tensors) for k, x in v.items()}
    if isinstance(v, list):
        return [_together(x, tensors) for x in v]
    return v


def differences(saved: dict, here: dict) -> list[str]:
    """What of :func:`made_with` differs between the saving process and this one, in words."""
    return [f"{key}: saved with {saved.get(key)!r}, here {value!r}"
            for key, value in here.items() if key != "program" and saved.get(key) != value]
