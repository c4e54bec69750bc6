"""A list key's items separated by space as well as commas (`FOREWARN_AZURE_APPROVE_TYPES=
"Preempt Terminate"`, an Environment= line), as `--provider "local aws"` is read: no item of
any list key (a provider, an EventType, a taint key) holds a space."""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import pytest
from forewarn.agent.config import ConfigError, load_settings
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

LISTS = {
    "azure.approve_types": ["Preempt", "Terminate", "Reboot"],
    "kubernetes.taints": ["karpenter.sh/disrupted", "example.com/reclaim", "node.kubernetes.io/x"],
    "kubernetes.extra_taints": ["example.com/reclaim", "example.com/b"],
    "kubernetes.terminate_taints": ["aws-node-termination-handler/spot-itn", "example.com/b"],
    "providers": ["local", "aws", "gcp"],
}


def _load(key: str, text: str) -> Any:
    variable = "FOREWARN_" + key.replace(".", "_").upper()
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN_")}
    with mock.patch.dict(os.environ, {**clean, variable: text}, clear=True):
        loaded: Any = load_settings()
    for part in key.split("."):
        loaded = getattr(loaded, part)
    return loaded


@settings(max_examples=examples(80), deadline=None)
@given(
    key=st.sampled_from(sorted(LISTS)),
    data=st.data(),
)
def test_items_separated_by_space_read_as_by_commas(key: str, data: st.DataObject) -> None:
    items = data.draw(st.lists(st.sampled_from(LISTS[key]), min_size=1, max_size=3, unique=True))
    separators = data.draw(
        st.lists(
            st.sampled_from([" ", "  ", "\t", ", ", " ,"]),
            min_size=len(items) - 1,
            max_size=len(items) - 1,
        )
    )
    text = items[0] + "".join(sep + item for sep, item in zip(separators, items[1:], strict=True))
    assert _load(key, text) == _load(key, ",".join(items))


def test_a_bad_item_among_them_is_still_named() -> None:
    with pytest.raises(ConfigError, match=r"azure\.approve_types: 'Preemt' is not an EventType"):
        _load("azure.approve_types", "Preemt Terminate")
