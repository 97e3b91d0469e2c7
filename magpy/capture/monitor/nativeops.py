"""Native thunks: tiny code objects that run one real instruction on given values.

Some instructions have intricate semantics living only in CPython's C code (the exception
group logic of PREP_RERAISE_STAR, MATCH_CLASS, IMPORT_FROM's fallbacks and messages, the
slow paths of UNPACK_*).  Rather than re-implementing them, the monitor assembles a code
object whose body is just that instruction and runs it natively: the semantics, and every
error message, are CPython's own.
"""
import dis
import functools
import types


def _cache_entries() -> dict:
    """opname -> inline-cache code units after it (dis keeps a list by opcode up to 3.12, a
    dict by name from 3.13)."""
    entries = dis._inline_cache_entries
    if isinstance(entries, dict):
        return entries
    return {name: entries[op] for name, op in dis.opmap.items() if op < len(entries)}


_CACHES = _cache_entries()


def assemble(ops):
    out = bytearray()
    for name, arg in ops:
        op = dis.opmap[name]
        if arg > 0xFF:
            for shift in (24, 16, 8):
                if arg >> shift:
                    out += bytes((dis.opmap["EXTENDED_ARG"], (arg >> shift) & 0xFF))
        out += bytes((op, arg & 0xFF))
        out += bytes(2 * _CACHES.get(name, 0))
    return bytes(out)


def _template(a, b, c):  # noqa: ARG001 - only its code object is used
    return None


@functools.lru_cache(maxsize=None)
def stack_op(opname, arg, nin, nout, names=(), consts=()):
    """A function of ``nin`` values running ``opname arg`` natively on them.

    It returns the top ``nout`` stack values afterwards as a tuple, in stack order
    (bottom first), dropping anything the instruction left below them.
    """
    op = dis.opmap[opname]
    depth = nin + dis.stack_effect(op, arg if op >= dis.HAVE_ARGUMENT else None)
    ops = [("RESUME", 0)] + [("LOAD_FAST", i) for i in range(nin)]
    ops += [(opname, arg), ("BUILD_TUPLE", nout)]
    ops += [("SWAP", 2), ("POP_TOP", 0)] * (depth - nout)
    ops += [("RETURN_VALUE", 0)]
    varnames = tuple(f"v{i}" for i in range(nin))
    code = _template.__code__.replace(
        co_code=assemble(ops), co_argcount=nin, co_nlocals=nin, co_varnames=varnames,
        co_names=names, co_consts=consts or (None,), co_stacksize=max(nin, depth) + 2,
        co_linetable=b"", co_exceptiontable=b"", co_name=opname.lower(),
        co_qualname=opname.lower())
    return types.FunctionType(code, {"__builtins__": __builtins__})


_MODULE_CODE = compile("pass", "<magpy import *>", "exec")


def import_star(module, globals, namespace, star_ops):
    """``from module import *`` into ``namespace``, exactly as the interpreter does it:
    ``star_ops`` are the instructions importing * from the module on top of the stack."""
    ops = [("RESUME", 0), ("LOAD_CONST", 0), *star_ops, ("LOAD_CONST", 1), ("RETURN_VALUE", 0)]
    code = _MODULE_CODE.replace(co_code=assemble(ops), co_consts=(module, None),
                                co_linetable=b"", co_exceptiontable=b"", co_stacksize=2)
    exec(code, globals, namespace)
