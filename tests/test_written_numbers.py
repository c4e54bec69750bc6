"""Numbers read from TOML and JSON that overflow keep their text: a refusal names `1e400`, not
"inf"."""

from __future__ import annotations

import json
import math
import sys

import pytest
from forewarn.protocol.writtenfloat import WrittenFloat, written_float
from hypothesis import example, given
from hypothesis import strategies as st

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# A float as TOML and JSON write one: sign, digits, fraction, exponent (any size).
FLOAT_TEXT = st.from_regex(r"\A-?[1-9][0-9]{0,3}(\.[0-9]{1,3})?[eE][-+]?[0-9]{1,4}\Z")


@given(FLOAT_TEXT)
@example("1e400")
@example("-1.5E+999")
@example("1e308")
def test_a_float_read_is_float_s_value_and_an_overflow_keeps_its_text(text: str) -> None:
    number = written_float(text)
    assert number == float(text)
    if math.isfinite(float(text)):
        assert type(number) is float
    else:
        assert isinstance(number, WrittenFloat)
        assert repr(number) == str(number) == text


@pytest.mark.parametrize("text", ["inf", "-inf", "+inf", "nan"])
def test_infinity_written_as_such_is_a_plain_float(text: str) -> None:
    number = written_float(text)
    assert type(number) is float
    assert repr(number) == repr(float(text))


@given(FLOAT_TEXT)
def test_toml_and_json_read_through_it_name_an_overflow_as_written(text: str) -> None:
    from_toml = tomllib.loads(f"x = {text}", parse_float=written_float)["x"]
    from_json = json.loads(f'{{"x": {text}}}', parse_float=written_float)["x"]
    for number in (from_toml, from_json):
        assert number == float(text)
        assert repr(number) == (text if not math.isfinite(float(text)) else repr(float(text)))
