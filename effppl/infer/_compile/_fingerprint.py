"""A cheap fingerprint of what tracing a model could read besides its arguments' shapes.

`model_fns` (`_fns.py`) traces the model on every call and compares its program with the one its
compiled functions were built from, so that a changed global or closure is never silently reused.
`fingerprint(model, extra)` lets it skip that trace: when the fingerprint equals the one taken
when the model was last traced for the same cache key and argument shapes, the cached functions
are reused as they are.

**What is fingerprinted** (recursively, to a bounded depth and number of values):

- a Python function: its code object (by identity: a redefined function is another one), its
  default arguments, its closure cells' contents, the function's own attributes, and every name
  its code (and the code nested in it: inner functions, lambdas, comprehensions) reads: the
  global or builtin it stands for; a module imported inside the function, by name;
- a `functools.partial`: its function, arguments and keywords; a bound method: its function
  and `self`; a `jax.jit` function: the function it wraps;
- a module outside the trusted libraries below: its attributes that the code reading it names;
- a class defined outside the trusted libraries: each of its own (and its bases') attributes,
  methods, properties and static/class methods; an instance of a class written in Python: its
  class and its `__dict__`;
- a JAX array: its identity (JAX arrays are immutable; the fingerprint keeps it alive so its
  `id` is not reused); a numpy array (mutable in place): its shape, dtype and bytes; numbers
  and strings by value; tuples, lists, dicts and sets by their items.

Functions, classes and modules of the trusted libraries (the standard library, JAX, numpy,
scipy, NumPyro, effppl, blackjax, optax, equinox, flax) count by identity: their code is taken
as unchanging, and only a function's closure and defaults are read (a closure built by a library
may hold the user's values). Their module-level settings are not read, except those the caller
passes as `settings` (`_fns.model_fns`: JAX's trace context, NumPyro's validation flag): a
library function or constant replaced at run time (`jnp.exp = ...`) is not seen.

**When it falls back** (`fingerprint` returns `None`: the model is traced as before): a value it
cannot understand (an object of a C type, e.g. a random generator, an iterator, an
`OrderedDict`; an instance of a class with `__slots__`; a module with a `__getattr__`; a numpy
array of objects or larger than 4 MiB; a tracer); code calling `globals`, `vars`, `locals`,
`eval`, `exec`, `getattr`, `setattr`, `delattr`, `__import__` or `compile`, or reading a clock,
the environment or a random generator other than JAX's keys (the modules `random`, `time`,
`datetime`, `os`, `sys`, `uuid`, `secrets`, `numpy.random`, or `np.random` through numpy); a
relative import, or a module imported inside the model that is not loaded yet; more than 2,048
values or 16 levels.
"""

import dis
import functools
import os
import sys
import sysconfig
import types
import weakref
from collections.abc import Hashable
from typing import Any, NamedTuple

import jax
import jax.core
import numpy as np

__all__ = ["Fingerprint", "fingerprint"]

_TRUSTED = frozenset(sys.stdlib_module_names) | {
    "jax", "jaxlib", "numpy", "scipy", "numpyro", "effppl", "blackjax", "optax", "equinox",
    "flax", "ml_dtypes", "opt_einsum", "typing_extensions"}
_IMPURE = frozenset({"random", "time", "datetime", "os", "sys", "uuid", "secrets",
                     "numpy.random", "_random"})
_DYNAMIC_LOOKUPS = frozenset({"globals", "vars", "locals", "eval", "exec", "getattr", "setattr",
                              "delattr", "__import__", "compile"})
_CLASS_SKIP = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                         "__annotations__", "__orig_bases__", "__parameters__", "_abc_impl",
                         "__abstractmethods__", "__match_args__", "__firstlineno__",
                         "__static_attributes__", "__dataclass_fields__",
                         "__dataclass_params__"})
_MAX_VALUES = 2048
_MAX_DEPTH = 16
_MAX_ARRAY_BYTES = 1 << 22
_JIT_TYPE = type(jax.jit(lambda: None))
_LIBRARY_FOLDERS = tuple({
    os.path.join(os.path.realpath(path), "")
    for path in [*(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
                 os.path.join(os.path.dirname(__file__), "..", "..")]})  # the last: effppl/
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class built at run time (a `class` statement)


class Fingerprint:
    """What `fingerprint` read: `tokens` (compared with `==`) and `keep`, the objects whose
    identity a token names, kept alive so that their `id` is not given to another object."""

    __slots__ = ("tokens", "keep")

    def __init__(self, tokens: tuple, keep: tuple):
        self.tokens, self.keep = tokens, keep

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fingerprint) and self.tokens == other.tokens

    __hash__ = None  # type: ignore[assignment]


class _Cannot(Exception):
    """A value the fingerprint does not understand: trace the model instead."""


class _CodeInfo(NamedTuple):
    names: frozenset  # every name the code tree reads: globals, attributes, imported names
    imports: tuple  # modules imported by name (`import a.b`, `from a.b import c`)


_code_infos: "weakref.WeakKeyDictionary[types.CodeType, _CodeInfo]" = weakref.WeakKeyDictionary()


def _code_info(code: types.CodeType) -> _CodeInfo:
    """The names read and the modules imported by `code` and the code objects nested in it."""
    info = _code_infos.get(code)
    if info is None:
        names, imports, stack = set(), [], [code]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
            imports.extend(ins.argval for ins in dis.get_instructions(c)
                           if ins.opname == "IMPORT_NAME")
        info = _CodeInfo(frozenset(names), tuple(imports))
        _code_infos[code] = info
    return info


def _trusted(module_name: Any) -> bool:
    """Whether `module_name` is a module of a trusted library, loaded from where such libraries
    live (the standard library's folders, site-packages, effppl's own folder): a user's file
    named `code.py` or `this.py` is not the standard library's."""
    return isinstance(module_name, str) and _trusted_top(module_name.split(".")[0])


@functools.lru_cache(maxsize=256)
def _trusted_top(top: str) -> bool:
    if top not in _TRUSTED:
        return False
    if top in sys.builtin_module_names:
        return True
    file = getattr(sys.modules.get(top), "__file__", None)
    return file is not None and os.path.realpath(file).startswith(_LIBRARY_FOLDERS)


def _python_class(cls: type) -> bool:
    """Whether every class of `cls`'s MRO but `object` is a class statement's (a heap type whose
    module is a `.py` file or `__main__`), without `__slots__`: its instances keep their state
    in their `__dict__`, none hidden in C (`collections.OrderedDict`, `random.Random` and
    `types.SimpleNamespace` are C types)."""
    for klass in cls.__mro__[:-1]:
        module = sys.modules.get(klass.__module__)
        file = getattr(module, "__file__", None) or ""
        if klass.__module__ != "__main__" and not file.endswith(".py"):
            return False
        if not klass.__flags__ & _HEAP_TYPE or "__slots__" in vars(klass):
            return False
    return True


class _Walker:
    def __init__(self):
        self.tokens: list = []
        self.keep: list = []
        self.seen: dict = {}
        self.count = 0

    def value(self, x: Any, depth: int, names: frozenset = frozenset()) -> None:
        self.count += 1
        if self.count > _MAX_VALUES or depth > _MAX_DEPTH:
            raise _Cannot
        t = type(x)
        if x is None or t in (bool, int, str, bytes) or x is Ellipsis:
            self.tokens.append((t, x))
            return
        if t is float:
            self.tokens.append((t, x.hex()))  # -0.0 is not 0.0
            return
        if t is complex:
            self.tokens.append((t, x.real.hex(), x.imag.hex()))
            return
        if id(x) in self.seen:
            self.tokens.append(("seen", self.seen[id(x)]))
            return
        self.seen[id(x)] = len(self.tokens)
        self.keep.append(x)
        self._object(x, t, depth + 1, names)

    def _object(self, x: Any, t: type, depth: int, names: frozenset) -> None:
        if t is types.ModuleType:  # the commonest first: a model's globals are mostly modules
            self._module(x, depth, names)
        elif t is types.FunctionType:
            self._function(x, depth)
        elif not (self._data(x, t, depth, names) or self._callable(x, t, depth, names)):
            self._other(x, t, depth, names)

    def _data(self, x: Any, t: type, depth: int, names: frozenset) -> bool:
        """Arrays, numbers and containers; `False` for anything else."""
        add = self.tokens.append
        if t in (tuple, list, set, frozenset):
            add((t, len(x)))
            for item in x:
                self.value(item, depth, names)
        elif t is dict:
            add((t, len(x)))
            for k, v in x.items():
                self.value(k, depth, names)
                self.value(v, depth, names)
        elif t is np.ndarray:
            if x.dtype.hasobject or x.nbytes > _MAX_ARRAY_BYTES:
                raise _Cannot
            add(("np", x.shape, x.dtype.str, x.tobytes()))
        elif isinstance(x, jax.core.Tracer):
            raise _Cannot
        elif isinstance(x, jax.Array):
            add(("jax", id(x)))
        elif isinstance(x, np.generic):
            if x.dtype.hasobject:
                raise _Cannot
            add(("np", x.dtype.str, x.tobytes()))
        elif isinstance(x, np.dtype):
            add(("dtype", x))
        else:
            return False
        return True

    def _callable(self, x: Any, t: type, depth: int, names: frozenset) -> bool:
        """Methods, partials, `jax.jit` functions, builtins; `False` for anything else."""
        add = self.tokens.append
        if t is types.MethodType:
            add(("method",))
            self.value(x.__func__, depth)
            self.value(x.__self__, depth, names)
        elif t is functools.partial:
            add(("partial",))
            self.value(x.func, depth)
            self.value(x.args, depth)
            self.value(x.keywords, depth)
        elif t is _JIT_TYPE:
            add(("jit", id(x)))
            self.value(x.__wrapped__, depth)
        elif t in (types.BuiltinFunctionType, types.MethodWrapperType,
                   types.WrapperDescriptorType, types.MethodDescriptorType):
            add(("builtin", id(x)))
            owner = getattr(x, "__self__", None)
            if owner is not None and not isinstance(owner, types.ModuleType):
                self.value(owner, depth, names)
        else:
            return False
        return True

    def _other(self, x: Any, t: type, depth: int, names: frozenset) -> None:
        """Classes, descriptors, named tuples and instances of Python classes."""
        if isinstance(x, type):
            self._class(x, depth)
        elif t in (staticmethod, classmethod):
            self.tokens.append((t,))
            self.value(x.__func__, depth)
        elif t is property:
            self.tokens.append((t,))
            for f in (x.fget, x.fset, x.fdel):
                self.value(f, depth)
        elif isinstance(x, tuple) and hasattr(t, "_fields"):  # a named tuple
            self.value(t, depth)
            self.value(tuple(x), depth, names)
        elif _python_class(t):
            self.value(t, depth)
            self.value(dict(vars(x)), depth, names)
        else:
            raise _Cannot

    def _function(self, f: types.FunctionType, depth: int) -> None:
        code = f.__code__
        info = _code_info(code)
        self.tokens.append(("fn", id(code)))
        self.keep.append(code)
        self.value(f.__defaults__, depth)
        self.value(f.__kwdefaults__, depth)
        for cell in f.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # not yet assigned
                self.tokens.append(("empty",))
                continue
            self.value(contents, depth, info.names)
        if f.__dict__:
            self.value(dict(f.__dict__), depth)
        scope = f.__globals__
        if _trusted(scope.get("__name__")):
            return  # a library's function: its module's globals are the library's own
        if not info.names.isdisjoint(_DYNAMIC_LOOKUPS):
            raise _Cannot
        builtins = scope.get("__builtins__", {})
        builtins = vars(builtins) if isinstance(builtins, types.ModuleType) else builtins
        for name in sorted(info.names):
            if name in scope:
                self.tokens.append(("global", name))
                self.value(scope[name], depth, info.names)
            elif name in builtins:
                self.tokens.append(("builtin", name, id(builtins[name])))
        for name in info.imports:
            if not name or name not in sys.modules:  # relative, or not loaded yet
                raise _Cannot
            self.tokens.append(("import", name))
            self.value(sys.modules[name], depth, info.names)

    def _module(self, module: types.ModuleType, depth: int, names: frozenset) -> None:
        name = module.__name__
        if name in _IMPURE or (name == "numpy" and "random" in names):
            raise _Cannot
        self.tokens.append(("module", name, id(module)))
        if _trusted(name):
            return
        attrs = vars(module)
        if "__getattr__" in attrs:  # attributes computed on demand (PEP 562)
            raise _Cannot
        for attr in sorted(names):
            if attr in attrs:
                self.tokens.append(("attr", attr))
                self.value(attrs[attr], depth, names)

    def _class(self, cls: type, depth: int) -> None:
        self.tokens.append(("class", id(cls)))
        if _trusted(cls.__module__):
            return
        if type(cls) is not type and not _trusted(type(cls).__module__):
            self.value(type(cls), depth)  # a user's metaclass
        for klass in cls.__mro__:
            if _trusted(klass.__module__):
                continue
            for attr, v in sorted(vars(klass).items()):
                if attr not in _CLASS_SKIP:
                    self.tokens.append(("attr", attr))
                    self.value(v, depth)


def fingerprint(model: Any, extra: Any = (), settings: Hashable = ()) -> Fingerprint | None:
    """The fingerprint of `model` (a function, a `functools.partial`, a bound method, an
    instance of a Python class with `__call__`, ...; see the module's docstring for what is
    read), of `extra` (values the caller adds, read as the model's: static arguments) and of
    `settings` (a hashable value compared as it is: JAX's trace context), or `None` when
    something it reads cannot be fingerprinted (then the model must be traced).

    **Returns:** a `Fingerprint`, equal (`==`) to another exactly when both read the same code
    and values, or `None`.
    """
    walker = _Walker()
    try:
        walker.value(model, 0)
        walker.value(extra, 0)
    except (_Cannot, RecursionError):
        return None
    return Fingerprint((settings, *walker.tokens), tuple(walker.keep))
