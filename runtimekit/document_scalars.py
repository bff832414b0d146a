"""Scalar rules shared by the bounded JSON and YAML loaders (``documents.py``, ``bounded_yaml.py``).

An integer of more digits than Python converts to text (``sys.get_int_max_str_digits``, 4300 by
default) and a string holding a lone surrogate are refused wherever they appear: past the first,
``str``, ``repr`` and ``json.dumps`` raise; the second cannot be encoded, logged or stored.
"""

from __future__ import annotations

import functools
import sys


def too_many_digits_rule() -> str:
    return f"a number of more than {sys.get_int_max_str_digits()} digits"


@functools.lru_cache(maxsize=4)
def _power_of_ten(digits: int) -> int:
    return 10**digits


def too_many_digits(value: int) -> bool:
    """Has ``value`` more decimal digits than Python converts to text (``str`` would raise)?"""
    limit = sys.get_int_max_str_digits()
    return limit > 0 and abs(value) >= _power_of_ten(limit)


def unicode_problem(text: str) -> str | None:
    """The rule a string breaks when it holds a lone surrogate (it cannot be encoded), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"not valid Unicode: a lone surrogate U+{ord(text[error.start]):04X}"
    return None
