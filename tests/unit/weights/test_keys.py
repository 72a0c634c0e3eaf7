"""Weights keys: every component counts, and `explain` shows each one."""

from __future__ import annotations

import hashlib

import pytest

from ringflow.core.errors import InputError
from ringflow.core.jsonio import sha256_json
from ringflow.weights.keys import explain, weights_key


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


BASE = {
    "tree_hash": digest("tree"),
    "train_seed": 0,
    "view_hash": digest("view"),
    "env_key": digest("env"),
    "train_args": [],
}

CHANGES = {
    "tree_hash": digest("tree 2"),
    "train_seed": 1,
    "view_hash": digest("view 2"),
    "env_key": digest("env 2"),
    "train_args": ["--ablate"],
}


def test_key_is_hash_of_the_components():
    key, components = weights_key(**BASE)
    assert components == BASE
    assert key == sha256_json(BASE)
    assert weights_key(**BASE)[0] == key


@pytest.mark.parametrize("component", sorted(CHANGES))
def test_each_component_changes_the_key(component):
    base_key, _ = weights_key(**BASE)
    changed_key, _ = weights_key(**{**BASE, component: CHANGES[component]})
    assert changed_key != base_key


def test_ablate_trains_its_own_weights():
    plain, _ = weights_key(**BASE)
    ablated, components = weights_key(**{**BASE, "train_args": ["--ablate"]})
    assert ablated != plain
    assert components["train_args"] == ["--ablate"]


@pytest.mark.parametrize(
    ("component", "bad"),
    [
        ("tree_hash", "not-a-hash"),
        ("view_hash", digest("v").upper()),
        ("env_key", None),
        ("train_seed", "0"),
        ("train_seed", True),
        ("train_args", "--ablate"),
    ],
)
def test_bad_components_are_refused(component, bad):
    with pytest.raises(InputError, match=component):
        weights_key(**{**BASE, component: bad})


def test_explain_lists_every_component():
    key, components = weights_key(**{**BASE, "train_args": ["--ablate"]})
    text = explain(key, components)
    lines = text.splitlines()
    assert key in lines[0] and "matches" in lines[0]
    assert len(lines) == 1 + len(components)
    for name, value in components.items():
        line = next(line for line in lines if line.strip().startswith(name))
        assert (value if isinstance(value, str) else str(value).replace("'", '"')) in line


def test_explain_flags_a_key_that_does_not_match():
    key, components = weights_key(**BASE)
    text = explain(key, {**components, "train_seed": 7})
    assert "MISMATCH" in text.splitlines()[0]
