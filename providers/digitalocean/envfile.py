"""`KEY=VALUE` text read as systemd reads an EnvironmentFile (its env-file.c), the form the
docs give for `digitalocean.credentials_file`: a password that works there works here.

What systemd does, and this with it: `#` and `;` begin a comment only at the start of a line.
The space around a key and an unquoted value goes. A value is made of parts: unquoted, where a
backslash keeps the next character as it is (a space, a quote, a backslash) and a backslash at
the end of a line joins the next one; in single quotes, everything as written; in double
quotes, a backslash before `"`, `\\`, `` ` `` or `$` stands for that character, before a newline
joins the lines, and before anything else stays. Quotes begin a part only at the start of the
value or right after another quoted part (`"a" "b"` is `ab`); inside an unquoted part they are
characters. Where this parts from systemd, it says so instead of guessing: a line without `=`
(systemd skips it) and a quote left open (systemd takes the rest of the file into the value)
are errors naming their line. An `export ` prefix, which systemd refuses, is taken off.
"""

from __future__ import annotations

import enum

COMMENTS = "#;"
NEWLINES = "\n\r"
WHITESPACE = " \t\n\r"
# Unescaped inside double quotes, as in a shell: any other backslash stays.
DOUBLE_QUOTE_ESCAPES = '"\\`$'


class _At(enum.Enum):
    PRE_KEY = enum.auto()
    KEY = enum.auto()
    PRE_VALUE = enum.auto()
    VALUE = enum.auto()
    VALUE_ESCAPE = enum.auto()
    SINGLE_QUOTE = enum.auto()
    DOUBLE_QUOTE = enum.auto()
    DOUBLE_QUOTE_ESCAPE = enum.auto()
    COMMENT = enum.auto()


class _Parser:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.at = _At.PRE_KEY
        self.key: list[str] = []
        self.value: list[str] = []
        # Where the unquoted space at the end of the value begins: it goes, as systemd's does.
        self.trailing_space: int | None = None
        self.line = 1
        self.key_line = 1
        self.quote_line = 1
        self.backslash_unquoted = False

    def push(self) -> None:
        key = self.key_text()
        value = self.value
        if self.at is _At.VALUE and self.trailing_space is not None:
            value = value[: self.trailing_space]
        self.values[key] = "".join(value)
        self.key, self.value, self.trailing_space = [], [], None
        self.at = _At.PRE_KEY

    def key_text(self) -> str:
        key = "".join(self.key).strip()
        if key.startswith("export ") or key.startswith("export\t"):
            key = key[len("export") :].lstrip()
        if not key:
            raise ValueError(f"line {self.key_line} is not KEY=VALUE")
        return key

    def feed(self, char: str) -> None:
        at = self.at
        if at is _At.PRE_KEY:
            if char in COMMENTS:
                self.at = _At.COMMENT
            elif char not in WHITESPACE:
                self.at, self.key_line = _At.KEY, self.line
                self.key.append(char)
        elif at is _At.KEY:
            if char in NEWLINES:
                raise ValueError(f"line {self.key_line} is not KEY=VALUE")
            if char == "=":
                self.key_text()  # an empty key is named here, at its line
                self.at, self.trailing_space = _At.PRE_VALUE, None
            else:
                self.key.append(char)
        elif at is _At.PRE_VALUE:
            if char in NEWLINES:
                self.push()
            elif char == "'":
                self.at, self.quote_line = _At.SINGLE_QUOTE, self.line
            elif char == '"':
                self.at, self.quote_line = _At.DOUBLE_QUOTE, self.line
            elif char == "\\":
                self.at = _At.VALUE_ESCAPE
                self.backslash_unquoted = True
            elif char not in WHITESPACE:
                self.at = _At.VALUE
                self.value.append(char)
        elif at is _At.VALUE:
            if char in NEWLINES:
                self.push()
            elif char == "\\":
                self.at, self.trailing_space = _At.VALUE_ESCAPE, None
                self.backslash_unquoted = True
            else:
                if char not in WHITESPACE:
                    self.trailing_space = None
                elif self.trailing_space is None:
                    self.trailing_space = len(self.value)
                self.value.append(char)
        elif at is _At.VALUE_ESCAPE:
            self.at = _At.VALUE
            if char not in NEWLINES:  # an escaped newline joins the lines
                self.value.append(char)
        elif at is _At.SINGLE_QUOTE:
            if char == "'":
                self.at = _At.PRE_VALUE
            else:
                self.value.append(char)
        elif at is _At.DOUBLE_QUOTE:
            if char == '"':
                self.at = _At.PRE_VALUE
            elif char == "\\":
                self.at = _At.DOUBLE_QUOTE_ESCAPE
            else:
                self.value.append(char)
        elif at is _At.DOUBLE_QUOTE_ESCAPE:
            self.at = _At.DOUBLE_QUOTE
            if char in DOUBLE_QUOTE_ESCAPES:
                self.value.append(char)
            elif char != "\n":
                self.value += ["\\", char]
        elif char in NEWLINES:  # the end of a comment
            self.at = _At.PRE_KEY
        if char == "\n":
            self.line += 1

    def end(self) -> dict[str, str]:
        if self.at in (_At.SINGLE_QUOTE, _At.DOUBLE_QUOTE, _At.DOUBLE_QUOTE_ESCAPE):
            raise ValueError(f"line {self.quote_line}: the quote opened there is not closed")
        if self.at is _At.KEY:
            raise ValueError(f"line {self.key_line} is not KEY=VALUE")
        if self.at in (_At.PRE_VALUE, _At.VALUE, _At.VALUE_ESCAPE):
            self.push()
        return self.values


def parse_env(text: str) -> dict[str, str]:
    """The values `text` assigns, the last of each key winning, as systemd reads them.
    ValueError naming the line (never a value) when it is not such a file."""
    return parse_env_with_notes(text)[0]


def parse_env_with_notes(text: str) -> tuple[dict[str, str], bool]:
    """`parse_env`, and whether an unquoted value held a backslash (which systemd, and so
    this, takes as an escape: a password written `a\\b` unquoted is `ab`)."""
    parser = _Parser()
    for char in text:
        parser.feed(char)
    return parser.end(), parser.backslash_unquoted


__all__ = ["parse_env", "parse_env_with_notes"]
