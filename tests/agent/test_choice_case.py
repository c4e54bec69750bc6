"""A word among a flag's choices in the case people type it (`notify DRAIN`, `wait --for
Terminate`, `--reason Scheduled-Maintenance`), as provider names and log levels are read."""

from __future__ import annotations

import pytest
from forewarn.agent.cli import build_parser
from hypothesis import given
from hypothesis import strategies as st

# command, the arguments before the word, the flag (None: positional), its choices, where
# the value lands, arguments after it.
CHOICES = [
    ("notify", [], None, ("drain", "terminate", "clear"), "action"),
    (
        "notify",
        ["drain"],
        "--reason",
        (
            "manual",
            "drill",
            "reclaim",
            "scheduled-maintenance",
            "host-maintenance",
            "node-drain",
        ),
        "reason",
    ),
    ("wait", [], "--for", ("drain", "terminate"), "wait_for"),
    ("ack", [], "--outcome", ("saved", "failed"), "outcome"),
]


@st.composite
def _typed(draw: st.DrawFn) -> tuple[int, str, str]:
    index = draw(st.integers(0, len(CHOICES) - 1))
    word = draw(st.sampled_from(CHOICES[index][3]))
    flags = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    typed = "".join(c.upper() if up else c for c, up in zip(word, flags, strict=True))
    pad = draw(st.sampled_from(["", " ", "\n"]))
    return index, typed + pad, word


@given(_typed())
def test_a_choice_reads_in_any_case(drawn: tuple[int, str, str]) -> None:
    """`forewarn notify DRAIN` and `wait --for TERMINATE` exited 2: 'invalid choice'."""
    index, typed, word = drawn
    command, before, flag, _, dest = CHOICES[index]
    argv = [command, *before, *([flag] if flag else []), typed]
    assert getattr(build_parser(command).parse_args(argv), dest) == word


@pytest.mark.parametrize(
    "argv",
    [
        ["drill", "local", "--scenario", "CI", "--handler", "Plain"],
    ],
)
def test_the_drills_choices_read_in_any_case(argv: list[str]) -> None:
    args = build_parser("drill").parse_args(argv)
    assert (args.scenario, args.handler) == ("ci", "plain")


def test_a_word_not_among_the_choices_is_still_refused() -> None:
    from forewarn.protocol.errors import UsageError

    # Named as typed, not lowered: 'drian' was a word nobody typed.
    with pytest.raises(UsageError, match="invalid choice 'Drian' \\(did you mean 'drain'\\?\\)"):
        build_parser("notify").parse_args(["notify", "Drian"])
