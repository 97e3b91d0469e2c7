"""Programs for instructions only Python 3.12's syntax produces: PEP 695 type parameters and
type aliases (CALL_INTRINSIC_1/2's type intrinsics, LOAD_FROM_DICT_OR_GLOBALS in the
annotation scopes of a class body).  Results are compared by name: type variables are
new objects on every run."""


def _describe(tp):
    return (type(tp).__name__, tp.__name__, getattr(tp, "__bound__", None),
            getattr(tp, "__constraints__", None), tp.__module__)


def generic_function():
    def first[T: int, *Ts, **P](xs: list[T]) -> T:
        return xs[0]

    def either[S: (str, bytes)](s: S) -> S:
        return s
    params = first.__type_params__ + either.__type_params__
    return first([3, 4]), either("s"), [_describe(p) for p in params]


def generic_class():
    class Box[T]:
        Default = int

        def get[U](self, default: Default) -> U:
            return default

        type Alias = list[Default]
    b = Box()
    return (b.get(1), [p.__name__ for p in Box.__type_params__], Box.__mro__[1].__name__,
            Box.Alias.__name__, Box.Alias.__value__, Box.get.__annotations__["default"])


def type_alias():
    type Pair[K] = tuple[K, K]
    return Pair.__name__, [p.__name__ for p in Pair.__type_params__], str(Pair.__value__)


PROGRAMS_312 = [(generic_function, ()), (generic_class, ()), (type_alias, ())]
