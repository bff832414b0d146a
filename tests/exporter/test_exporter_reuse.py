"""What the exposition reuses between renders is invalidated by any change: compressed families,
whole family blocks and the process collector's label values."""

import dataclasses
import gzip
import zlib

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import make_attribution, make_facts, make_gpu, make_process, make_snapshot, make_state

from runtimekit.attribution.types import Owner
from runtimekit.exporter import build_collector_set
from runtimekit.exporter.collectors.process import ProcessCollector
from runtimekit.exporter.family import GAUGE, Family
from runtimekit.exporter.gzipparts import GzipParts
from runtimekit.exporter.render import OPENMETRICS, TEXT, Renderer, render
from runtimekit.gpu.types import NOT_SUPPORTED

PARTS = [b"# HELP a A.\n# TYPE a gauge\n" + b"a{x=\"1\"} 1.0\n" * 200, b"", b"b 2.0\n" * 50, b"# EOF\n"]


def _single_member(compressed: bytes) -> bytes:
    """Decode with zlib's gzip reader, refusing anything after the first member."""
    reader = zlib.decompressobj(16 + zlib.MAX_WBITS)
    body = reader.decompress(compressed) + reader.flush()
    assert reader.eof and reader.unused_data == b""
    return body


def test_gzip_of_parts_is_one_member_that_decodes_to_the_joined_parts():
    compressed = GzipParts().compress(PARTS)
    assert gzip.decompress(compressed) == b"".join(PARTS)
    assert _single_member(compressed) == b"".join(PARTS)


def test_reused_compressed_parts_still_decode_after_a_part_changed_and_moved():
    parts = GzipParts()
    parts.compress(PARTS)
    changed = [PARTS[2], PARTS[0].replace(b"1.0", b"3.0"), b"c 1.0\n", PARTS[0], PARTS[3]]
    assert _single_member(parts.compress(changed)) == b"".join(changed)
    assert _single_member(parts.compress([])) == b""


async def test_aiohttp_client_decodes_the_compressed_parts():
    body = GzipParts().compress(PARTS)

    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/", handler)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/")
        assert await response.read() == b"".join(PARTS)


def _family(value: float) -> Family:
    family = Family(GAUGE, "runtimekit_test_ratio", "A test family.", ["gpu"])
    family.add_metric(("0",), value)
    family.add_metric(("1",), 0.5)
    return family


@pytest.mark.parametrize("fmt", [TEXT, OPENMETRICS])
def test_an_unchanged_family_is_the_same_bytes_and_a_changed_value_is_rendered_again(fmt):
    renderer = Renderer(fmt)
    first = renderer.render_parts([_family(0.25)])
    again = renderer.render_parts([_family(0.25)])
    assert again[0] is first[0]
    changed = renderer.render_parts([_family(0.75)])
    assert b"".join(changed) == render([_family(0.75)], fmt)
    assert b'runtimekit_test_ratio{gpu="0"} 0.75' in changed[0]
    helped = Family(GAUGE, "runtimekit_test_ratio", "Other help.", ["gpu"])
    helped.rows = _family(0.75).rows
    assert b"Other help." in renderer.render_parts([helped])[0]


def _process_lines(state) -> list[str]:
    body = render(build_collector_set().collect(state.view()), TEXT).decode()
    return [line for line in body.splitlines() if line.startswith("runtimekit_process_gpu_memory_bytes{")]


def test_process_labels_follow_a_new_owner_name_and_value():
    state = make_state(make_snapshot((make_gpu(0),)))
    collector = ProcessCollector()
    first = make_process(4242)
    state.publish_attribution(make_attribution(processes=(first,)))
    before = list(collector.collect(state.view()))[0].rows
    moved = Owner(namespace="other", pod="p-1", container="c")
    row = dataclasses.replace(first, host=make_facts(4242, owner=moved, name="torchrun"), owner=moved, used_memory_bytes=5)
    state.publish_attribution(make_attribution(processes=(row,)))
    after = list(collector.collect(state.view()))[0].rows
    assert before[0][0] != after[0][0]
    assert after == [(("0", first.gpu_uuid, "", "", "4242", "torchrun", "other", "p-1", "c"), 5.0)]
    assert any('pod="p-1"' in line and line.endswith(" 5.0") for line in _process_lines(state))


def _rows_by_family(collector: ProcessCollector, state) -> dict[str, list]:
    return {family.name: list(getattr(family, "rows", family.samples)) for family in collector.collect(state.view())}


def test_process_rows_reused_by_row_object_equal_a_fresh_collectors_at_every_step():
    """The collector reuses the family rows of the very AttributedProcess objects of its last render;
    whatever the next attribution keeps, changes, duplicates (C+G), moves or drops, its families are
    what a collector seeing that attribution first would make."""
    state = make_state(make_snapshot((make_gpu(0), make_gpu(1))))
    shared = make_facts(7, name="shared")
    a, b = make_process(1), make_process(2, sm_utilization=NOT_SUPPORTED)
    on_both = (make_process(7, 0, host=shared), make_process(7, 1, host=shared))
    steps = [
        (a, b, *on_both),
        (a, b, *on_both),  # the same objects: every row reused
        (dataclasses.replace(a, used_memory_bytes=3), b, *on_both),  # one row changed value
        (b, a, on_both[1], on_both[0]),  # reordered: CPU and resident rows follow the first GPU seen
        (a, a, make_process(3, host=None)),  # C+G listed twice; a process /proc could not read
        (b,),  # the rest gone
        (dataclasses.replace(b, owner=Owner(namespace="x", pod="y", container="z")),),
    ]
    collector = ProcessCollector(cmdline=True)
    for processes in steps:
        state.publish_attribution(make_attribution(processes=processes))
        assert _rows_by_family(collector, state) == _rows_by_family(ProcessCollector(cmdline=True), state)


def _big_family(rows: list[tuple[tuple[str, ...], float]]) -> Family:
    family = Family(GAUGE, "runtimekit_test_process_bytes", "A big test family.", ["gpu", "pid"])
    family.rows = list(rows)
    return family


@pytest.mark.parametrize("fmt", [TEXT, OPENMETRICS])
def test_a_big_family_is_written_in_chunks_that_only_a_change_renders_again(fmt):
    """A Family of CHUNKED_ROWS rows or more is split where its rows say (label tuple identity), so
    a change renders and compresses its own chunk only; joined, the parts are always what a fresh
    render writes."""
    from runtimekit.exporter.render import CHUNKED_ROWS

    labels = [(str(i // 100), str(1000 + i)) for i in range(3 * CHUNKED_ROWS)]  # kept, as collectors keep them
    rows = [(label, float(i)) for i, label in enumerate(labels)]
    renderer, parts = Renderer(fmt), GzipParts()
    before = renderer.render_parts([_big_family(rows)])
    assert len(before) > 4  # the header and several chunks
    steps = [
        lambda r: r[:100] + [(r[100][0], -1.5)] + r[101:],  # one value changed
        lambda r: r[:300] + [(("9", "99999"), 7.0)] + r[300:],  # a row came
        lambda r: r[:10] + r[11:],  # a row went
        lambda r: r[400:] + r[:400],  # moved around
        lambda r: r,  # nothing changed
    ]
    for step in steps:
        rows = step(rows)
        after = renderer.render_parts([_big_family(rows)])
        assert b"".join(after) == render([_big_family(rows)], fmt)
        assert gzip.decompress(parts.compress(after)) == b"".join(after)
        new = [part for part in after if not any(part is old for old in before)]
        assert len(new) <= 4, len(new)  # the changed chunk(s), and the chunk a move cut open
        before = after
    assert new == []
