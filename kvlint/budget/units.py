"""Units and value parsing for kvlint-budget: exact sizes, bandwidths, counts, shares and length mixes.

Sizes are exact integers of bytes and bandwidths exact fractions of bytes per second; ``GiB`` is binary
(2**30 B) and ``GB``, ``TB/s`` decimal (10**9 B, 10**12 B/s). A bad value raises :class:`BudgetError`,
whose message names the value.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: Decimal units (SI): what memory vendors and bandwidth figures use (1.6 TB/s = 1.6e12 B/s).
DECIMAL_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
#: Binary units (IEC): what allocators report (48 GiB = 48 * 2**30 B).
BINARY_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE_UNITS = {"": 1, **DECIMAL_UNITS, **BINARY_UNITS}
_UNIT_NAMES = ", ".join(u for u in _SIZE_UNITS if u)
_QUANTITY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_DECIMAL = re.compile(r"\s*\d+(?:\.\d+)?\s*")


class BudgetError(ValueError):
    """A bad input; the message names the argument or file and is shown as a one-line error."""


def _quantity(text: str, what: str) -> Fraction:
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise BudgetError(f"invalid {what} {text!r}: expected a number and a unit, e.g. 48GiB")
    number, unit = match.groups()
    if unit not in _SIZE_UNITS:
        raise BudgetError(f"invalid {what} {text!r}: unit {unit!r} is not one of {_UNIT_NAMES}")
    return Fraction(number) * _SIZE_UNITS[unit]


def parse_size(text: str) -> int:
    """Parse ``48GiB`` / ``64GB`` / ``1073741824`` into bytes (GiB binary, GB decimal, bare = bytes)."""
    value = _quantity(text, "size")
    if value.denominator != 1:
        raise BudgetError(f"invalid size {text!r}: not a whole number of bytes")
    return value.numerator


def parse_bandwidth(text: str) -> Fraction:
    """Parse ``1.6TB/s`` (decimal: 1.6e12 B/s) or ``800GiB/s`` into bytes per second."""
    if not text.strip().endswith("/s"):
        raise BudgetError(f"invalid bandwidth {text!r}: expected a size per second, e.g. 1.6TB/s")
    value = _quantity(text.strip()[:-2], "bandwidth")
    if value == 0:
        raise BudgetError(f"invalid bandwidth {text!r}: must be positive")
    return value


def parse_positive_int(text: str) -> int:
    """Parse a strictly positive integer."""
    if not text.strip().isdigit() or int(text) == 0:
        raise BudgetError(f"expected a positive integer, got {text!r}")
    return int(text)


def parse_int_list(text: str) -> tuple[int, ...]:
    """Parse ``1,8,32`` into positive integers."""
    return tuple(parse_positive_int(item) for item in text.split(","))


def parse_share(text: str) -> Fraction:
    """Parse a fraction of step time in (0, 1], e.g. ``0.4``."""
    if not _DECIMAL.fullmatch(text) or not 0 < Fraction(text.strip()) <= 1:
        raise BudgetError(f"expected a decimal in (0, 1], got {text!r}")
    return Fraction(text.strip())


def parse_lengths(text: str) -> tuple[tuple[int, Fraction], ...]:
    """Parse a length mix: ``512,2048,8192`` (equally likely) or ``512:0.5,2048:0.3,8192:0.2`` (weights).

    Weights are relative (normalised by their sum), so ``512:1,8192:3`` means one short per three long.
    """
    mix = []
    for item in text.split(","):
        length, _, weight = item.partition(":")
        if weight and not (_DECIMAL.fullmatch(weight) and Fraction(weight.strip()) > 0):
            raise BudgetError(f"invalid weight {weight!r} in {item!r}: expected a positive decimal")
        mix.append((parse_positive_int(length), Fraction(weight.strip()) if weight else Fraction(1)))
    return tuple(mix)
