"""Frozen records whose methods are written once (docs/architecture.md#typed-state).

Python 3.11 writes and compiles the methods of a dataclass as its module is imported:
about 1 ms for a frozen class and its six methods. Every execution is a process of its
own that imports the typed state, the settings and the records of the mechanisms, some
thirty classes. A `@frozen_record` class is a dataclass for its fields
(`dataclasses.fields`, `replace` and `asdict` work as for any), whose constructor,
equality, hash, repr and frozen guards are `Frozen`'s, written once for all of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, FrozenInstanceError, dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_fields_only = dataclass(init=False, eq=False, repr=False)
_FIELDS: dict[type, tuple[dataclasses.Field, ...]] = {}


def frozen_record(cls: type[T]) -> type[T]:
    """Make `cls` (a subclass of Frozen) a dataclass that generates no method. A class
    without a docstring would get one made from its signature, a walk of every field."""
    cls.__doc__ = cls.__doc__ or f"{cls.__name__}: a frozen record."
    return _fields_only(cls)


def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = dataclasses.fields(cls)
    return found


class Frozen:
    """What `@dataclass(frozen=True)` would generate, for any frozen record: fields set in
    their declared order (positionally or by name, defaults and factories for the rest),
    then `__post_init__` where the class has one; equality and hash over the compared
    fields; a repr of the shown ones; no assignment afterwards."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        name = type(self).__name__
        every = [f for f in _fields(type(self)) if f.init]
        # Keyword-only fields come after the others, as a dataclass's own __init__ puts them.
        fields = [f for f in every if not f.kw_only] + [f for f in every if f.kw_only]
        positional = len(every) - sum(f.kw_only for f in every)
        if len(args) > positional:
            raise TypeError(f"{name}: takes {positional} fields, got {len(args)} values")
        for f, value in zip(fields, args, strict=False):  # the rest are named or default
            if f.name in kwargs:
                raise TypeError(f"{name}: {f.name!r} given twice")
            object.__setattr__(self, f.name, value)
        for f in fields[len(args) :]:
            if f.name in kwargs:
                value = kwargs.pop(f.name)
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise TypeError(f"{name}: {f.name!r} is missing")
            object.__setattr__(self, f.name, value)
        if kwargs:
            raise TypeError(f"{name}: no field {sorted(kwargs)[0]!r}")
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in _fields(type(self)) if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in _fields(type(self)) if f.repr)
        return f"{type(self).__name__}({', '.join(shown)})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
