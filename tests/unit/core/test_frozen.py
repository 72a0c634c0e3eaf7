"""Frozen records (core/frozen.py) behave as frozen dataclasses do, without a method
generated per class."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import field

import pytest

from ringflow.core.frozen import Frozen, frozen_record
from ringflow.core.node_state import ExecutionResult
from ringflow.core.settings import Views


@frozen_record
class Point(Frozen):
    x: int
    y: int = 0
    tags: list = field(default_factory=list)
    note: str = field(default="", compare=False, repr=False)


@frozen_record
class Checked(Frozen):
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("value must be >= 0")
        object.__setattr__(self, "value", int(self.value))


def test_fields_are_set_by_position_by_name_and_by_default():
    p = Point(1, tags=["a"])
    assert (p.x, p.y, p.tags, p.note) == (1, 0, ["a"], "")
    assert Point(1).tags is not Point(1).tags  # a factory gives each its own


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "Point: 'x' is missing"),
        ((1,), {"z": 2}, "Point: no field 'z'"),
        ((1,), {"x": 2}, "Point: 'x' given twice"),
        ((1, 2, [], "", 5), {}, "Point: takes 4 fields, got 5 values"),
    ],
)
def test_a_wrong_construction_is_a_type_error_that_names_the_field(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


def test_post_init_checks_and_normalises():
    assert Checked(True).value == 1 and type(Checked(True).value) is int
    with pytest.raises(ValueError, match="value must be"):
        Checked(-1)


def test_equality_hash_and_repr_follow_the_fields_flags():
    a, b = Point(1, 2, note="one"), Point(1, 2, note="two")
    assert a == b and a != Point(1, 3) and a != (1, 2)
    assert hash(Views(("a",), None, "f")) == hash(Views(("a",), None, "f"))
    assert repr(a) == "Point(x=1, y=2, tags=[])"


def test_a_record_cannot_be_changed_in_place():
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y


def test_replace_asdict_and_pickle_work_as_for_a_dataclass():
    p = Point(1, 2, ["t"], "n")
    assert dataclasses.replace(p, y=5) == Point(1, 5, ["t"])
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": ["t"], "note": "n"}
    copy = pickle.loads(pickle.dumps(p))
    assert copy == p and copy.note == "n"
    result = ExecutionResult(status="ok", node="n001", wall_s=1.5)
    assert pickle.loads(pickle.dumps(result)) == result


@frozen_record
class Base(Frozen):
    extra: dict = field(default_factory=dict, kw_only=True)


@frozen_record
class Derived(Base):
    a: int
    b: int = 2


def test_keyword_only_fields_of_a_base_leave_the_positions_to_the_subclass():
    d = Derived(1, 3, extra={"k": 1})
    assert (d.a, d.b, d.extra) == (1, 3, {"k": 1})
    assert Derived(1).extra == {}
    with pytest.raises(TypeError, match="Derived: takes 2 fields, got 3 values"):
        Derived(1, 2, {"k": 1})


def test_no_method_is_generated_per_class():
    for cls in (Point, Views, ExecutionResult):
        own = set(vars(cls))
        assert not own & {"__init__", "__eq__", "__hash__", "__repr__", "__setattr__"}, cls
        assert dataclasses.is_dataclass(cls) and cls.__doc__
