"""digitalocean.credentials_file read as systemd reads an EnvironmentFile (env-file.c's
parse_env_file_internal): quotes and backslashes as systemd gives them to a service."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.providers.digitalocean.imap import Credentials, load_credentials
from hypothesis import given
from hypothesis import strategies as st

# What one may type in a password: any character but NUL and the newline ones.
_password = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r"), min_size=1
)


def read(tmp_path: Path, password_line: str) -> str:
    path = tmp_path / "imap.env"
    path.write_text(f"FOREWARN_IMAP_USER=ops\n{password_line}\n")
    path.chmod(0o600)
    return load_credentials(path).password


@pytest.mark.parametrize(
    ("written", "read_as"),
    [
        (r'"a\"b"', 'a"b'),  # read as a\"b: the login failed
        (r'"a\\b"', "a\\b"),
        (r'"a\$b\`c"', "a$b`c"),
        (r'"a\nb"', r"a\nb"),  # no C escapes in double quotes: the backslash stays
        (r"'a\"b'", r"a\"b"),  # single quotes keep everything as written
        (r"a\ b", "a b"),
        (r"a\\b", "a\\b"),
        (r"\ a", " a"),
        ("a  ", "a"),
        ('"a" "b"', "ab"),  # systemd joins quoted parts; the space between them goes
        ("'a'\"b\"c", "abc"),
        ('a "b"', 'a "b"'),  # a quote inside an unquoted value is a character
        ("a#b ;c", "a#b ;c"),
    ],
)
def test_a_password_is_read_as_systemd_reads_it(tmp_path: Path, written: str, read_as: str):
    assert read(tmp_path, f"FOREWARN_IMAP_PASSWORD={written}") == read_as


def test_a_quoted_value_may_go_on_over_lines_as_in_systemd(tmp_path: Path):
    path = tmp_path / "imap.env"
    path.write_text('FOREWARN_IMAP_PASSWORD="a\\\nb"\nFOREWARN_IMAP_USER=o\\\n  ps\n')
    assert load_credentials(path) == Credentials("o  ps", "ab")


def test_a_quote_left_open_names_its_line(tmp_path: Path):
    path = tmp_path / "imap.env"
    path.write_text('FOREWARN_IMAP_USER=ops\nFOREWARN_IMAP_PASSWORD="a\\"\n')
    with pytest.raises(Exception, match="line 2: the quote opened there is not closed"):
        load_credentials(path)


@given(_password)
def test_any_password_written_in_double_quotes_as_systemd_escapes_is_read_back(password: str):
    escaped = "".join("\\" + char if char in '"\\`$' else char for char in password)
    assert _parsed(f'FOREWARN_IMAP_PASSWORD="{escaped}"') == password


@given(_password.filter(lambda password: "'" not in password))
def test_any_password_without_a_single_quote_is_read_back_in_single_quotes(password: str):
    assert _parsed(f"FOREWARN_IMAP_PASSWORD='{password}'") == password


@given(st.text(max_size=40))
def test_any_file_reads_as_values_or_a_value_error(text: str):
    from forewarn.providers.digitalocean.envfile import parse_env

    try:
        values = parse_env(text)
    except ValueError as error:
        assert str(error).startswith("line ")
        return
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in values.items())


def _parsed(line: str) -> str:
    from forewarn.providers.digitalocean.envfile import parse_env

    return parse_env(f"FOREWARN_IMAP_USER=ops\n{line}\n")["FOREWARN_IMAP_PASSWORD"]


def test_a_backslash_in_an_unquoted_value_is_said_once_without_the_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    assert read(tmp_path, r"FOREWARN_IMAP_PASSWORD=s3cr\et") == "s3cret"
    assert read(tmp_path, r"FOREWARN_IMAP_PASSWORD=s3cr\et") == "s3cret"
    assert caplog.text.count("a backslash in an unquoted value escapes") == 1
    assert "s3cr" not in caplog.text
