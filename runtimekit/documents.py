"""The one place where YAML and JSON from outside the process are parsed, with bounds.

Every configuration file, state file and request payload goes through ``load_yaml`` or
``load_json``. Both refuse, with a ``DocumentError`` naming the document (``what``: a path, a
flag, a request body) and the rule broken:

- **file type**: anything but a regular file (a FIFO, a device, a directory), refused without
  waiting: opening a FIFO no one writes blocks for good, and a device may act on being opened;
- **size**: more than ``max_bytes`` bytes (checked before parsing; ``read_bounded`` reads at most
  one byte more than the cap, so a huge file is never read whole);
- **encoding**: bytes that are not UTF-8 (the offset of the first bad byte);
- **depth**: containers nested deeper than ``max_depth`` (the top-level mapping is depth 1). YAML is
  checked while composing, before the recursive composer or any consumer can overflow the stack;
  JSON after CPython's scanner (whose own RecursionError is reported as the same rule);
- **alias expansion** (YAML): the nodes the document's aliases stand for, counted as the subtree
  size of each anchored node, added up per alias use, and the depth an alias reaches, may not pass
  ``max_alias_nodes`` / ``max_depth``. A 700-byte "billion laughs" document expands to ~10^9 nodes
  and is refused at the first alias that passes the bound, in microseconds; a recursive alias
  (``&a [*a]``) is refused as infinite;
- **syntax**: the parser's problem with its line and column (1-based);
- **scalars**: an integer of more digits than Python converts to text (``sys.get_int_max_str_digits``,
  4300 by default; past it ``str``, ``repr`` and ``json.dumps`` raise, so no caller could even log
  it), a string holding a lone surrogate (a valid ``\\ud800`` escape in JSON and YAML, not valid
  Unicode: it cannot be encoded, logged or stored), or a scalar YAML cannot construct (a date that
  does not exist). JSON names the value's path (``alerts[0].labels.node``), YAML its line;
- **duplicate keys**: a mapping (JSON object) that gives one key twice. Parsers disagree on which
  value wins (PyYAML and ``json`` take the last, others the first), so a duplicate silently hides
  one of two values: ``dry_run: true`` ... ``dry_run: false`` in a configuration file, or a field
  of an HTTP payload that a proxy checked in one copy while we act on the other. Alertmanager and
  every writer of ours encode a mapping with unique keys, so a duplicate is refused everywhere,
  configuration, state and payloads alike. YAML's merge key (``<<: *base``) is no duplicate: the
  mapping's own keys override the merged ones, as YAML defines.

Messages are short: they never echo the input beyond a few dozen characters (``MAX_MESSAGE``).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from runtimekit.bounded_yaml import BoundedLoader, Refused, where
from runtimekit.document_scalars import too_many_digits_rule, unicode_problem

__all__ = [
    "DEFAULT_MAX_ALIAS_NODES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DocumentError",
    "load_json",
    "load_yaml",
    "read_bounded",
]

#: Largest document accepted by default: 1 MiB. The packaged policy is 20 KB, a scenario 6 KB, an
#: Alertmanager notification a few KB; 1 MiB leaves room for recorded scenarios and state files.
DEFAULT_MAX_BYTES = 1 << 20
#: Deepest nesting accepted by default (our documents nest 3 to 6 deep; Python's recursion limit,
#: which json.loads and recursive validators share, is 1000).
DEFAULT_MAX_DEPTH = 64
#: Most nodes that YAML aliases may expand to, summed over the document (the packaged scenarios use
#: about 150: eight GPUs sharing one NVLink list).
DEFAULT_MAX_ALIAS_NODES = 10_000
#: Longest error message (characters): errors go to logs, terminals and HTTP clients.
MAX_MESSAGE = 300


class DocumentError(ValueError):
    """A document that is too large, too deep, not UTF-8, not valid YAML/JSON or an alias bomb.

    The message is ``"<what>: <rule>"``, at most ``MAX_MESSAGE`` characters; ``what`` and
    ``rule`` are kept apart for callers that name the document themselves."""

    def __init__(self, what: str, rule: str) -> None:
        self.what, self.rule = what, rule[:MAX_MESSAGE]
        text = f"{what}: {rule}"
        super().__init__(text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "...")


def read_bounded(path: str | Path, *, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of the regular file at ``path`` (``_open_regular``), at most ``max_bytes + 1`` of them
    read: DocumentError when larger than ``max_bytes``; OSError (unreadable) is left to the caller."""
    with _open_regular(path, what=what) as stream:
        data = stream.read(max_bytes + 1)
    _check_size(data, what, max_bytes)
    return data


def _open_regular(path: str | Path, *, what: str) -> BinaryIO:
    """The file at ``path`` open for reading, if a regular file after symbolic links; else, never
    waiting, DocumentError ``"<what>: not a regular file (a FIFO)"`` (or for a path with a NUL byte).
    Checked before opening and again on the descriptor, opened O_NONBLOCK (a FIFO swapped in between
    must not block either); OSError (missing, unreadable) is left to the caller."""
    if "\0" in os.fspath(path):
        raise DocumentError(what.replace("\0", "\\0"), "not a path: it holds a NUL byte")
    _check_regular(os.stat(path).st_mode, what)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        _check_regular(os.fstat(descriptor).st_mode, what)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _check_regular(mode: int, what: str) -> None:
    """DocumentError naming what the file is unless ``mode`` (``st_mode``) is a regular file's."""
    if not stat.S_ISREG(mode):
        kinds = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
                 stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}
        raise DocumentError(what, f"not a regular file ({kinds.get(stat.S_IFMT(mode), 'of an unknown type')})")


def load_yaml(
    text_or_bytes: str | bytes,
    *,
    what: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_alias_nodes: int = DEFAULT_MAX_ALIAS_NODES,
) -> Any:
    """One YAML document (safe tags only: what ``yaml.safe_load`` gives), within the bounds;
    an empty document is None. DocumentError naming ``what`` and the rule otherwise."""
    text = _text(text_or_bytes, what, max_bytes)
    loader = BoundedLoader(text, max_depth=max_depth, max_alias_nodes=max_alias_nodes)
    try:
        return loader.get_single_data()
    except Refused as refused:
        raise DocumentError(what, f"{refused.rule}{where(refused.mark)}") from None
    except yaml.MarkedYAMLError as error:
        problem = error.problem or error.context or "syntax error"
        raise DocumentError(what, f"not valid YAML: {problem}{where(error.problem_mark)}") from None
    except yaml.YAMLError as error:  # reader errors (control characters), without a mark
        raise DocumentError(what, f"not valid YAML: {error}") from None
    except RecursionError:  # only when a caller's max_depth is beyond what the stack allows
        raise DocumentError(what, f"nested deeper than the parser allows (max_depth {max_depth})") from None
    finally:
        loader.dispose()


def load_json(
    text_or_bytes: str | bytes,
    *,
    what: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Any:
    """One JSON value within the bounds; DocumentError naming ``what`` and the rule otherwise
    (an empty input is a syntax error, as in ``json.loads``)."""
    text = _text(text_or_bytes, what, max_bytes)
    try:
        value = json.loads(text, object_pairs_hook=_json_object, parse_int=_json_int)
    except json.JSONDecodeError as error:
        raise DocumentError(what, f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    except RecursionError:  # CPython's scanner: about 1000 levels
        raise DocumentError(what, f"nested deeper than {max_depth} levels") from None
    problem = _json_problem(value, max_depth)
    if problem:
        raise DocumentError(what, problem)
    return value


# -- the bounds -----------------------------------------------------------------------------------

def load_yaml_file(path: str | Path, *, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The YAML file at ``path`` within the bounds (``read_bounded`` then ``load_yaml``, one size
    bound for both); DocumentError as those, OSError (unreadable) left to the caller."""
    return load_yaml(read_bounded(path, what=what, max_bytes=max_bytes), what=what, max_bytes=max_bytes)


def load_json_file(
    path: str | Path, *, what: str, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> Any:
    """The JSON file at ``path`` within the bounds, as ``load_yaml_file`` for YAML."""
    data = read_bounded(path, what=what, max_bytes=max_bytes)
    return load_json(data, what=what, max_bytes=max_bytes, max_depth=max_depth)


def _check_size(data: str | bytes, what: str, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise DocumentError(what, f"larger than {max_bytes} bytes")


def _text(text_or_bytes: str | bytes, what: str, max_bytes: int) -> str:
    """The document as text: at most ``max_bytes`` bytes of UTF-8."""
    if isinstance(text_or_bytes, str):
        _check_size(text_or_bytes, what, max_bytes)  # characters <= bytes: a cheap first cut
        try:
            data = text_or_bytes.encode("utf-8")
        except UnicodeEncodeError as error:
            raise DocumentError(what, f"not UTF-8: a lone surrogate at character {error.start}") from None
    else:
        data = text_or_bytes
    _check_size(data, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DocumentError(what, f"not UTF-8: invalid byte 0x{data[error.start]:02x} at offset {error.start}") from None


class _Malformed:
    """Put by the JSON decoder's hooks where a value is refused, so the walk that follows names its
    path (the hooks themselves do not know where they are)."""

    def __init__(self, rule: str) -> None:
        self.rule = rule


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _Malformed:
    """A JSON object as a dict, or _Malformed when it gives a key twice (module docstring)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return _Malformed(f"duplicate key {repr(key)[:40]}")
        seen.add(key)
    return dict(pairs)


def _json_int(text: str) -> int | _Malformed:
    """A JSON integer, or _Malformed past Python's int/str conversion limit."""
    try:
        return int(text)
    except ValueError:  # the scanner's pattern only admits digits: the limit is the one cause
        return _Malformed(too_many_digits_rule())


def _json_problem(value: Any, limit: int) -> str | None:
    """The first rule parsed JSON breaks, as ``"<path>: <rule>"``: nested deeper than ``limit``,
    a value refused by the hooks, a lone surrogate in a string or a key; None when there is none.
    Walked without recursion; a path is spelled out only for the value that breaks a rule."""
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]  # (item, depth, path: (parent, step) or None)
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            rule = unicode_problem(item)
        elif isinstance(item, _Malformed):
            rule = item.rule
        elif isinstance(item, dict | list):
            if depth + 1 > limit:
                return f"nested deeper than {limit} levels"
            rule = _keys_problem(item) if isinstance(item, dict) else None
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend(reversed([(child, depth + 1, (path, step)) for step, child in pairs]))  # in document order
        else:
            continue
        if rule:
            return f"{_json_path(path)}: {rule}" if path else rule
    return None


def _keys_problem(item: dict[str, Any]) -> str | None:
    for key in item:
        rule = unicode_problem(key)
        if rule:
            return f"{rule} (in a key)"
    return None


def _json_path(path: Any) -> str:
    """``alerts[0].labels`` from the walk's linked (parent, step) pairs."""
    steps: list[str | int] = []
    while path is not None:
        path, step = path
        steps.append(step)
    text = ""
    for step in reversed(steps):
        text += f"[{step}]" if isinstance(step, int) else f".{step[:40]}" if text else step[:40]
    return text
