"""The one place where YAML and JSON from outside the process are parsed, with bounds.

Every configuration file, state file and request payload goes through ``load_yaml`` or
``load_json``. Both refuse, with a ``DocumentError`` naming the document (``what``: a path, a
flag, a request body) and the rule broken:

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
- **syntax**: the parser's problem with its line and column (1-based).

Messages are short: they never echo the input beyond a few dozen characters (``MAX_MESSAGE``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, SequenceNode

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
    """The bytes of the file at ``path``, reading at most ``max_bytes + 1`` of them: DocumentError
    when the file is larger than ``max_bytes``; OSError (unreadable) is left to the caller."""
    with open(path, "rb") as stream:
        data = stream.read(max_bytes + 1)
    _check_size(data, what, max_bytes)
    return data


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
    loader = _BoundedLoader(text, max_depth=max_depth, max_alias_nodes=max_alias_nodes)
    try:
        return loader.get_single_data()
    except _Refused as refused:
        raise DocumentError(what, f"{refused.rule}{_where(refused.mark)}") from None
    except yaml.MarkedYAMLError as error:
        problem = error.problem or error.context or "syntax error"
        raise DocumentError(what, f"not valid YAML: {problem}{_where(error.problem_mark)}") from None
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
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise DocumentError(what, f"not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    except RecursionError:  # CPython's scanner: about 1000 levels
        raise DocumentError(what, f"nested deeper than {max_depth} levels") from None
    depth = _json_depth(value, max_depth)
    if depth > max_depth:
        raise DocumentError(what, f"nested deeper than {max_depth} levels")
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


def _json_depth(value: Any, limit: int) -> int:
    """The nesting depth of parsed JSON (a scalar is 0), walked without recursion; the walk stops
    as soon as it passes ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def _where(mark: Any) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


class _Refused(Exception):
    """A bound broken while composing (turned into DocumentError by ``load_yaml``)."""

    def __init__(self, rule: str, mark: Any) -> None:
        super().__init__(rule)
        self.rule, self.mark = rule, mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that bounds nesting and alias expansion while composing the node graph.

    Each composed node gets its expanded size (itself plus its children, aliases included) and
    height, computed once from its children's (so counting is linear in the document, never in its
    expansion). An alias adds its anchored node's size to the document's alias total and may not
    reach deeper than ``max_depth`` where it is used."""

    def __init__(self, text: str, *, max_depth: int, max_alias_nodes: int) -> None:
        super().__init__(text)
        self._max_depth, self._max_alias_nodes = max_depth, max_alias_nodes
        self._depth = 0
        self._alias_nodes = 0
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            measured = self._measured.get(id(node))
            if measured is None:
                raise _Refused(f"alias *{event.anchor[:40]} refers to its own anchor (infinite expansion)",
                               event.start_mark)
            size, height = measured
            self._alias_nodes += size
            if self._alias_nodes > self._max_alias_nodes:
                raise _Refused(f"aliases expand to more than {self._max_alias_nodes} nodes", event.start_mark)
            if self._depth + height > self._max_depth:
                raise _Refused(f"nested deeper than {self._max_depth} levels (through alias *{event.anchor[:40]})",
                               event.start_mark)
            return node
        nests = 1 if self.check_event(SequenceStartEvent, MappingStartEvent) else 0
        if nests and self._depth >= self._max_depth:
            raise _Refused(f"nested deeper than {self._max_depth} levels", self.peek_event().start_mark)
        self._depth += nests
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= nests
        if node is not None:  # (the stub's type; the composer always returns a node here)
            self._measured[id(node)] = self._measure(node)
        return node

    def _measure(self, node: Node) -> tuple[int, int]:
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [item for pair in node.value for item in pair]
        else:
            return 1, 0
        size, height = 1, 0
        for child in children:
            child_size, child_height = self._measured[id(child)]
            size += child_size
            height = max(height, child_height)
        return size, height + 1
