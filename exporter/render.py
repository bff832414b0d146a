"""Fast exposition rendering, byte for byte what prometheus_client writes for our families.

prometheus_client's ``generate_latest`` re-validates and re-escapes every label *name* of every
sample (~9 µs a series); a node with 512 GPU processes has over 5,000 series, so a cold scrape
spent ~50 ms rendering. Our families are known: gauges, counters and info metrics with valid
legacy label names, no timestamps, exemplars or histograms. This renderer relies on that —
``render`` raises ``ValueError`` for anything else — and tests check its output equals
prometheus_client's for a full exposition in both formats.

Most label sets do not change from one sample to the next (the same GPUs, links, processes and
pods), and many values do not either, so a ``Renderer`` keeps what it wrote. For our light
``Family`` (rows written without a label dict or a Sample per series): the whole line of every
row (label values, value) of the last render, found by one C-level dict lookup per row, and the
label text per (sample name, label values) for rows whose value changed. For prometheus_client
families: the label text per (name, value) pairs. Lines and label text of series gone are
dropped, so the caches hold about the last exposition. Formatted values are memoised too
(floatToGoString is the costly part of a line).

Whole families are kept as well: a ``Family`` whose rows, help, type and unit equal the last
render's is written as the same bytes objects as then, found by one list comparison (cheap when
the collectors hand back the same label tuples). ``render_parts`` returns the exposition as bytes
objects per family, so that what is built from it (the gzip variant, ``gzipparts.py``) can reuse
its own work for the parts that did not change. A big family (``CHUNKED_ROWS`` rows or more: the
process families on a busy node) is one part for its header and one per chunk of about
``CHUNK_ROWS`` rows, split where the rows themselves say, so that one process that came, went or
changed costs its chunk, not its family's hundreds of rows (``_chunks_of``). Measured at 512
processes (2026-12-02, one core of the development VM, same run): the gzip body grows from ~65 to
~74 KB (each chunk is compressed on its own), the render and compression of a view fall by a
quarter.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from runtimekit.exporter.family import Family

TEXT, OPENMETRICS = "text", "openmetrics"
_SUPPORTED = frozenset({"gauge", "counter", "info"})

_LabelKey = tuple[tuple[str, str], ...]  # (name, value) pairs in the sample's order
_Lines = dict[str, dict[tuple[tuple[str, ...], float], str]]  # sample name -> Family row -> its line
_NO_LINES: dict[tuple[tuple[str, ...], float], str] = {}
_Row = tuple[tuple[str, ...], float]
# name -> ((type, help, unit, label names), rows, the family's parts) of the last render
_Blocks = dict[str, tuple[tuple[str, str, str, tuple[str, ...]], list[_Row], tuple[bytes, ...]]]
# sample name -> a chunk's first label values -> (its rows, their lines, its bytes) of the last render
_Chunks = dict[str, dict[tuple[str, ...], tuple[list[_Row], list[str], bytes]]]

# A Family with this many rows or more is written in chunks of about CHUNK_ROWS rows (see _chunks_of).
CHUNKED_ROWS = 256
CHUNK_ROWS = 64


def _escape(value: str) -> str:
    """Label value and OpenMetrics HELP escaping: backslash, newline, double quote."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _value(number: float) -> str:
    if number == 0.0:  # before the cache: -0.0 == 0.0 and they hash alike, but print differently
        return "0.0" if math.copysign(1.0, number) > 0 else "-0.0"
    if number == 1.0:
        return "1.0"
    return _go_float(number)


@functools.lru_cache(maxsize=1 << 16)
def _go_float(number: float) -> str:
    return floatToGoString(number)


def _label_text(pairs: _LabelKey) -> str:
    return "{" + ",".join([f'{key}="{_escape(value)}"' for key, value in sorted(pairs)]) + "}"


class Renderer:
    """Renders families in one format, reusing the lines and label text of series seen in the last render.

    Two renders may run at once (the plain and gzip variants of one view, or two views): each builds
    its own new label-text and line caches from the last ones and swaps them in whole, so neither
    sees a half-built one, and the one that finishes last decides what the next render reuses. The
    label text of Family rows (``_prefixes``) is one memo shared by both, only added to and pruned
    by replacing a family's entry whole.
    """

    def __init__(self, fmt: str) -> None:
        if fmt not in (TEXT, OPENMETRICS):
            raise ValueError(f"unknown exposition format {fmt!r}; allowed: {TEXT}, {OPENMETRICS}")
        self.fmt = fmt
        self._labels: dict[_LabelKey, str] = {}
        self._lines: _Lines = {}
        self._blocks: _Blocks = {}
        self._chunks: _Chunks = {}
        self._prefixes: dict[str, dict[tuple[str, ...], str]] = {}  # sample name -> label values -> label text

    def render(self, families: Iterable[Family | Metric]) -> bytes:
        """Prometheus text 0.0.4 (``text``) or OpenMetrics 1.0.0 (``openmetrics``)."""
        return b"".join(self.render_parts(families))

    def render_parts(self, families: Iterable[Family | Metric]) -> list[bytes]:
        """The exposition as one bytes object per family (its HELP, TYPE and samples), then the
        OpenMetrics ``# EOF``; joined, they are ``render``'s output. A ``Family`` equal to the last
        render's (rows, help, type, unit, label names) is the very bytes object written then."""
        openmetrics = self.fmt == OPENMETRICS
        previous, previous_lines, previous_blocks, previous_chunks = self._labels, self._lines, self._blocks, self._chunks
        current: dict[_LabelKey, str] = {}
        current_lines: _Lines = {}
        current_blocks: _Blocks = {}
        current_chunks: _Chunks = {}
        parts: list[bytes] = []
        for metric in families:
            if metric.type not in _SUPPORTED:
                raise ValueError(f"{metric.name}: type {metric.type} is not rendered here")
            if isinstance(metric, Family):
                signature = (metric.type, metric.documentation, metric.unit, metric.labelnames)
                name, rows = metric.sample_name, metric.rows
                kept = previous_blocks.get(metric.name)
                if kept is not None and kept[0] == signature and kept[1] == rows:
                    blocks = kept[2]
                    if name in previous_lines:
                        current_lines[name] = previous_lines[name]
                    if name in previous_chunks:
                        current_chunks[name] = previous_chunks[name]
                elif len(rows) >= CHUNKED_ROWS:
                    header = "".join(self._header(metric, openmetrics)).encode("utf-8")
                    blocks = (header, *self._chunks_of(metric, previous_chunks.get(name, {}), current_chunks))
                else:
                    out = self._header(metric, openmetrics)
                    self._rows_of(metric, previous_lines, current_lines, out)
                    blocks = ("".join(out).encode("utf-8"),)
                current_blocks[metric.name] = (signature, rows, blocks)
                parts.extend(blocks)
                continue
            out = self._header(metric, openmetrics)
            append = out.append
            for sample in metric.samples:
                if sample.timestamp is not None or sample.exemplar is not None or sample.native_histogram is not None:
                    raise ValueError(f"{metric.name}: timestamps, exemplars and histograms are not rendered here")
                labels = sample.labels
                if not labels:
                    append(f"{sample.name} {_value(sample.value)}\n")
                    continue
                key = tuple(labels.items())
                text = current.get(key)
                if text is None:
                    text = previous.get(key)
                    if text is None:
                        text = _label_text(key)
                    current[key] = text
                append(f"{sample.name}{text} {_value(sample.value)}\n")
            parts.append("".join(out).encode("utf-8"))
        if openmetrics:
            parts.append(b"# EOF\n")
        self._labels, self._lines, self._blocks, self._chunks = current, current_lines, current_blocks, current_chunks
        return parts

    @staticmethod
    def _header(metric: Family | Metric, openmetrics: bool) -> list[str]:
        """HELP, TYPE (and OpenMetrics UNIT) lines of a family."""
        if openmetrics:
            out = [f"# HELP {metric.name} {_escape(metric.documentation)}\n", f"# TYPE {metric.name} {metric.type}\n"]
            if metric.unit:
                out.append(f"# UNIT {metric.name} {metric.unit}\n")
            return out
        name = metric.name + ("_total" if metric.type == "counter" else "_info" if metric.type == "info" else "")
        kind = "gauge" if metric.type == "info" else metric.type
        help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return [f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"]

    def _chunks_of(self, family: Family, previous: dict[tuple[str, ...], tuple[list[_Row], list[str], bytes]],
                   current: _Chunks) -> list[bytes]:
        """A big Family's rows as bytes in chunks, each the same bytes object as at the last render
        while its rows are the same.

        A chunk ends after a row whose label tuple's identity falls on 1 in CHUNK_ROWS: the
        boundaries are set by the rows themselves, not their positions, so a row that comes or
        goes changes only its own chunk (the collectors hand back the same label tuples for the
        same series). A chunk is found again by its first row's label values; the lines of a
        changed chunk are taken from its last version where the row is the same, else formatted
        with the label text kept per label values."""
        name, rows = family.sample_name, family.rows
        prefixes = self._prefixes_of(family)
        made: dict[tuple[str, ...], tuple[list[_Row], list[str], bytes]] = {}
        out: list[bytes] = []
        ends = [position + 1 for position, row in enumerate(rows) if (id(row[0]) >> 4) % CHUNK_ROWS == 0]
        start = 0
        for end in (*ends, len(rows)):
            if end <= start:
                continue
            chunk = rows[start:end]
            start = end
            first = chunk[0][0]
            before = previous.get(first)
            if before is not None and before[0] == chunk:
                made[first] = before
                out.append(before[2])
                continue
            known = dict(zip(before[0], before[1], strict=True)) if before is not None else {}
            lines = []
            for row in chunk:
                line = known.get(row)
                lines.append(line if line is not None else _line(family, prefixes, row))
            made[first] = (chunk, lines, "".join(lines).encode("utf-8"))
            out.append(made[first][2])
        current[name] = made
        return out

    def _prefixes_of(self, family: Family) -> dict[tuple[str, ...], str]:
        """The label text kept per label values of ``family``'s samples (``_line``); forgotten for
        label sets gone once they outnumber the family's rows."""
        prefixes = self._prefixes.get(family.sample_name)
        if prefixes is None or len(prefixes) > 2 * len(family.rows) + 64:
            kept = prefixes or {}
            prefixes = self._prefixes[family.sample_name] = {
                values: kept[values] for values, _ in family.rows if values in kept}
        return prefixes

    def _rows_of(self, family: Family, previous: _Lines, current: _Lines, out: list[str]) -> None:
        """Write a Family's rows. A row (label values, value) equal to one of the last render's
        reuses its whole line — one C-level dict lookup per row; a new or changed row is formatted
        with the label text kept for its label values."""
        name, labelnames, rows = family.sample_name, family.labelnames, family.rows
        if not labelnames:
            out.extend([f"{name} {_value(number)}\n" for _, number in rows])
            return
        lines: list[str | None] = list(map(previous.get(name, _NO_LINES).get, rows))
        if None in lines:
            prefixes = self._prefixes_of(family)
            for position, line in enumerate(lines):
                if line is None:
                    lines[position] = _line(family, prefixes, rows[position])
        current[name] = dict(zip(rows, lines, strict=True))  # type: ignore[arg-type]  # no None is left
        out.extend(lines)  # type: ignore[arg-type]


def _line(family: Family, prefixes: dict[tuple[str, ...], str], row: _Row) -> str:
    """One row's line, with the label text kept in ``prefixes`` (made and kept when new)."""
    values, number = row
    prefix = prefixes.get(values)
    if prefix is None:
        prefix = prefixes[values] = family.sample_name + _label_text(tuple(zip(family.labelnames, values, strict=True)))
    return f"{prefix} {_value(number)}\n"


def render(families: Iterable[Family | Metric], fmt: str) -> bytes:
    """Render once, with no label text kept (see ``Renderer`` for repeated renders)."""
    return Renderer(fmt).render(families)
