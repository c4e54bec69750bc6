"""Checkpoint sizes people know: "14GB", "2.4GiB", a bandwidth such as "500MB/s", "750MBps" or
"10Gbit/s", and an estimate from the parameter count ("7B") with precision and optimizer.

Sizes are bytes; GB is 10^9 bytes (as prices are quoted), GiB 2^30.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BITS = {"bit": 1 / 8, "kbit": 10**3 / 8, "mbit": 10**6 / 8, "gbit": 10**9 / 8, "tbit": 10**12 / 8}
# ASCII digits: `\d` took Arabic-Indic `١٢` and full-width digits, which float() reads as
# 12, and nobody types meaning 12 (refused by `_digits_0_to_9`, naming them).
_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\.[0-9]+)"
# Units keep their case: in `Gb` the small b is a bit, in `GB` the capital B a byte.
_SIZE = re.compile(rf"^{_NUMBER}\s*([a-z]+)\Z", re.IGNORECASE)
# `/s`, `/sec`, `/second`, `per second`, or `ps` after B or b: `500MB/sec` was not a rate.
_PER_SECOND = re.compile(
    r"^(.*?)(?:\s*(?:/|\s+per\s+)\s*(?:s|secs?|seconds?)|([bB])ps)\Z", re.IGNORECASE
)
_COUNT = re.compile(rf"^{_NUMBER}\s*([kmbt]?)\Z")
# A number written with a comma (`2,50`, `14,5GB`, `1,234`) at the start of the text.
# A sign is kept before it (`-2,50` was "could not convert string to float", where `-2.50`
# is refused as negative).
_LEADING_COMMA = re.compile(r"^(\s*[-+]?)([0-9.]*,[0-9.,]*)(.*)\Z", re.DOTALL)
_DECIMAL_COMMA = re.compile(r"^([0-9]*),([0-9]+)\Z")


def decimal_point(text: str) -> str:
    """`text` with the comma of a number at its start read as the decimal mark where it can
    be nothing else: `2,50` and `0,023` (a thousands comma has three digits after it, and
    none before it starts with 0), `14,5GB`. ValueError where it may group thousands
    (`1,234`: 1234 or 1.234), or with both marks or several commas (`1,234.50`)."""
    leading = _LEADING_COMMA.match(text)
    if leading is None:
        return text
    number = leading.group(2)
    match = _DECIMAL_COMMA.match(number)
    if match is None:
        raise ValueError(
            f"{text.strip()!r}: write a number with one decimal mark and no thousands "
            "separator (1234.5 or 1234,5)"
        )
    whole, fraction = match.groups()
    if len(fraction) == 3 and whole[:1] not in ("", "0") and len(whole) <= 3:
        raise ValueError(
            f"{text.strip()!r} is {whole}{fraction} with a thousands comma or "
            f"{whole}.{fraction} with a decimal one; write {whole}{fraction} or "
            f"{whole}.{fraction}"
        )
    return f"{leading.group(1)}{whole}.{fraction}{leading.group(3)}"


_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}

# Bytes per parameter of the weights as trained and saved.
PRECISIONS = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# Bytes per parameter of optimizer state (fp32): AdamW's two moments, SGD's momentum.
OPTIMIZERS = {"adamw": 8, "sgd": 4, "none": 0}
# Below fp32, an optimizer steps an fp32 master copy of the weights, which is saved too.
MASTER_COPY = 4


def _digits_0_to_9(text: str, example: str) -> None:
    """ValueError when `text` has digits other than 0-9, as a duration's refusal says it."""
    if any(char.isdecimal() and not char.isascii() for char in text):
        raise ValueError(
            f"{text!r} has digits other than 0-9; write it in the digits 0-9, such as {example}"
        )


def _finite(value: float, text: str, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be positive (got {text!r})")
    return value


def _unit_bytes(unit: str) -> tuple[float, bool] | None:
    """Bytes in one `unit`, and whether it counts bits; None when it is not a unit.

    As SI and IEC write them, B is a byte and b a bit: `MB` is a megabyte, `Mb` and `Mbit` a
    megabit. A unit all in small letters (`mb`, `gb`) is read as bytes, as sizes are typed.
    """
    low = unit.lower()
    if low in _BITS:
        return _BITS[low], True
    if low not in _UNITS:
        return None
    if len(unit) > 1 and unit.endswith("b") and not unit[:-1].islower():
        return _UNITS[low] / 8, True
    return _UNITS[low], False


# A prefix without its B: `14G`, as `du -h` and `ls -lh` print a size (in 2^30 bytes), is
# 10^9 bytes to a cloud's bill. The plan reads neither for it: it names both.
_PREFIX_POWERS = {"k": (3, 10), "m": (6, 20), "g": (9, 30), "t": (12, 40)}


def _prefix_alone(number: str, unit: str, per: str = "") -> str | None:
    """Both readings of a size written with a prefix alone (`14G`, `14Gi`), else None."""
    low = unit.lower()
    if low.removesuffix("i") not in _PREFIX_POWERS:
        return None
    stem = low[0].upper()
    decimal, binary = _PREFIX_POWERS[low[0]]
    du = "" if per else f", what `du -h` and `ls -lh` mean by {stem}"
    return (
        f"{number}{unit}{per} names no unit: write {number}{stem}B{per} (10^{decimal} bytes) or "
        f"{number}{stem}iB{per} (2^{binary} bytes{du})"
    )


def parse_size(text: str) -> float:
    """Bytes in `14GB`, `2.4 GiB`, `500MB`: a unit is required (B, KB, MB, GB, TB or the
    binary KiB ... TiB); a unit in bits (`14Gb`) is refused, not read as bytes."""
    _digits_0_to_9(text, "14GB")
    match = _SIZE.match(decimal_point(text).strip())
    unit = _unit_bytes(match.group(2)) if match else None
    if not match or unit is None:
        both = _prefix_alone(match.group(1), match.group(2)) if match else None
        if both is not None:
            raise ValueError(f"{both} (got {text!r})")
        raise ValueError(f"not a size such as 14GB or 2.4GiB (got {text!r})")
    scale, bits = unit
    if bits:
        name = match.group(2)
        stem = name[:-3] if name.lower().endswith("bit") else name[:-1]
        raise ValueError(
            f"{name} is a unit of bits (b is a bit, B a byte): give the size in bytes, "
            f"such as {match.group(1)}{stem[:1].upper()}{stem[1:]}B (got {text!r})"
        )
    return _finite(float(match.group(1)) * scale, text, "a size")


def parse_bandwidth(text: str) -> float:
    """Bytes per second in `500MB/s`, `750MBps`, `1.2GiB/s`, `10Gbit/s`, `10Gb/s` or
    `10Gbps` (`/sec`, `/second` and `per second` as `/s`): B is a byte and b a bit, `/s` and
    `ps` alike (Azure quotes disk throughput in
    MBps, bytes; networks are quoted in Gbps, bits)."""
    _digits_0_to_9(text, "500MB/s")
    per_second = _PER_SECOND.match(decimal_point(text).strip())
    if not per_second:
        raise ValueError(f"not a rate such as 500MB/s or 10Gbit/s (got {text!r})")
    size, ps_unit = per_second.groups()
    if ps_unit is not None:
        size += "bit" if ps_unit == "b" else "B"
    match = _SIZE.match(size.strip())
    unit = _unit_bytes(match.group(2)) if match else None
    if not match or unit is None:
        both = _prefix_alone(match.group(1), match.group(2), "/s") if match else None
        if both is not None:
            raise ValueError(f"{both} (got {text!r})")
        raise ValueError(f"not a rate such as 500MB/s or 10Gbit/s (got {text!r})")
    return _finite(float(match.group(1)) * unit[0], text, "a bandwidth")


# Fewer parameters than any model whose checkpoint is worth planning: a bare number below
# this is a count written without its suffix (`--params 7` meant 7B, and planned a 112 B
# checkpoint).
_SMALLEST_MODEL = 1e5


def parse_count(text: str) -> float:
    """A parameter count: `7B`, `350M`, `1.3e9`, `70b`; a bare number below 100,000 (`7`) is
    refused, as a count missing its suffix."""
    _digits_0_to_9(text, "7B")
    match = _COUNT.match(decimal_point(text).strip().lower())
    if not match:
        raise ValueError(f"not a parameter count such as 7B or 350M (got {text!r})")
    count = _finite(float(match.group(1)) * _COUNT_SUFFIX[match.group(2)], text, "a count")
    if not match.group(2) and count < _SMALLEST_MODEL:
        written = text.strip()
        raise ValueError(
            f"a bare {written} is {written} parameters, too few for a model: write {written}B "
            f"for {written} billion or {written}M for {written} million (got {text!r})"
        )
    return count


@dataclass(frozen=True)
class SizeEstimate:
    """A checkpoint's size from the model: parameters x bytes per parameter."""

    params: float
    precision: str
    optimizer: str

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}")

    @property
    def parts(self) -> dict[str, int]:
        """Bytes per parameter, by what they hold."""
        parts = {f"{self.precision} weights": PRECISIONS[self.precision]}
        if self.optimizer != "none" and self.precision != "fp32":
            parts["fp32 master weights"] = MASTER_COPY
        if OPTIMIZERS[self.optimizer]:
            state = "AdamW moments" if self.optimizer == "adamw" else "SGD momentum"
            parts[f"{state} (fp32)"] = OPTIMIZERS[self.optimizer]
        return parts

    @property
    def bytes_per_param(self) -> int:
        return sum(self.parts.values())

    @property
    def bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def how(self) -> str:
        """The computation, as the table prints it."""
        terms = " + ".join(f"{size} B {name}" for name, size in self.parts.items())
        return (
            f"{count_text(self.params)} parameters x ({terms}) = {self.bytes_per_param} B per "
            f"parameter = {self.bytes / 1e9:.4g} GB"
        )


def count_text(count: float) -> str:
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{count / scale:.4g}{suffix}"
    return f"{count:.4g}"


__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "SizeEstimate",
    "count_text",
    "decimal_point",
    "parse_bandwidth",
    "parse_count",
    "parse_size",
]
