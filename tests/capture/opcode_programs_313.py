"""Programs for instructions only Python 3.13's syntax produces: PEP 696 type-parameter
defaults (CALL_INTRINSIC_2's INTRINSIC_SET_TYPEPARAM_DEFAULT).  Results are compared by
name: type variables are new objects on every run."""


def typeparam_defaults():
    def pick[T = int, *Ts = *tuple[str, ...], **P = [float]](x: T) -> T:
        return x

    class Box[K = str]:
        pass
    params = pick.__type_params__ + Box.__type_params__
    return pick(3), [(p.__name__, str(p.__default__)) for p in params]


PROGRAMS_313 = [(typeparam_defaults, ())]
