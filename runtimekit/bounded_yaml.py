"""A PyYAML SafeLoader that bounds nesting, alias expansion, duplicate keys and scalars while composing.

``documents.load_yaml`` is its one user, and turns ``Refused`` into ``DocumentError``; the rules
themselves are described in ``documents.py``'s docstring.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from runtimekit.document_scalars import too_many_digits, too_many_digits_rule, unicode_problem


def where(mark: Any) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


_INT_TAG, _MERGE_TAG, _VALUE_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"


def _base_60_too_long(text: Any) -> bool:
    """Would YAML 1.1's base-60 integer ``text`` (``1:30:00``) pass the conversion limit? Each ``:``
    multiplies it by 60, and PyYAML's loop doing so is quadratic: refused before it runs."""
    limit = sys.get_int_max_str_digits()
    return isinstance(text, str) and limit > 0 and text.count(":") * math.log10(60) >= limit


def _unconstructed(node: Node, error: ValueError) -> str:
    """The rule a scalar breaks when its constructor raised ValueError: a decimal integer past the
    conversion limit, or a value of its type that does not exist."""
    if node.tag == _INT_TAG and sum(char.isdigit() for char in str(node.value)) > sys.get_int_max_str_digits():
        return too_many_digits_rule()
    return f"not a valid {node.tag.rsplit(':', 1)[-1]}: {str(error)[:60]}"


class Refused(Exception):
    """A bound broken while composing (turned into DocumentError by ``load_yaml``)."""

    def __init__(self, rule: str, mark: Any) -> None:
        super().__init__(rule)
        self.rule, self.mark = rule, mark


class BoundedLoader(yaml.SafeLoader):
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
                raise Refused(f"alias *{event.anchor[:40]} refers to its own anchor (infinite expansion)",
                               event.start_mark)
            size, height = measured
            self._alias_nodes += size
            if self._alias_nodes > self._max_alias_nodes:
                raise Refused(f"aliases expand to more than {self._max_alias_nodes} nodes", event.start_mark)
            if self._depth + height > self._max_depth:
                raise Refused(f"nested deeper than {self._max_depth} levels (through alias *{event.anchor[:40]})",
                               event.start_mark)
            return node
        nests = 1 if self.check_event(SequenceStartEvent, MappingStartEvent) else 0
        if nests and self._depth >= self._max_depth:
            raise Refused(f"nested deeper than {self._max_depth} levels", self.peek_event().start_mark)
        self._depth += nests
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= nests
        if node is not None:  # (the stub's type; the composer always returns a node here)
            self._measured[id(node)] = self._measure(node)
            if isinstance(node, MappingNode):
                self._refuse_duplicate_keys(node)
        return node

    def _refuse_duplicate_keys(self, node: MappingNode) -> None:
        """Refused at the second of two scalar keys with the same value (``1`` and ``0x1`` too), checked
        on the mapping's own keys as composed, before merge keys (``<<``) add theirs."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag in (_MERGE_TAG, _VALUE_TAG):
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise Refused(f"duplicate key {repr(key)[:40]}", key_node.start_mark)
            seen.add(key)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """The value of ``node``, or Refused with its line for a scalar that cannot be constructed (a
        date that does not exist) or an integer past Python's int/str conversion limit."""
        if node.tag == _INT_TAG and _base_60_too_long(node.value):
            raise Refused(too_many_digits_rule(), node.start_mark)
        try:
            value = super().construct_object(node, deep)
        except ValueError as error:
            raise Refused(_unconstructed(node, error), node.start_mark) from None
        if isinstance(value, int) and too_many_digits(value):
            raise Refused(too_many_digits_rule(), node.start_mark)
        return value

    def construct_scalar(self, node: Any) -> Any:
        """The text of a scalar (every safe tag's constructor reads it here); Refused when an escape
        made a lone surrogate (``"\\ud800"``: YAML, unlike JSON, never pairs two escapes into one
        character, so write U+1F600 as ``"\\U0001F600"``)."""
        text = super().construct_scalar(node)
        rule = unicode_problem(text) if isinstance(text, str) else None
        if rule:
            raise Refused(rule, node.start_mark)
        return text

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
