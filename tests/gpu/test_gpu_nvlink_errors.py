"""NVLink error counts: read per link only when their totals moved (``errors.read_nvlinks``), and
the session's field-value rows (``nvml._field_value_rows``) decoding every value type."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from runtimekit.gpu import fields
from runtimekit.gpu.errors import ERRORS_REREAD_SECONDS, LinkErrorCounts, read_nvlinks
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import NOT_SUPPORTED, Unavailable

COUNTER, BATCH = "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetFieldValues"
LINKS = 18  # dgx-h100
GPUS = 8


def driver_counts(gpu: int, link: int) -> tuple[int, int, int, int]:
    """The driver's own (CRC flit, CRC data, replay, recovery) for one link, straight through pynvml."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    return tuple(pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter) for counter in (
        pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
        pynvml.NVML_NVLINK_ERROR_DL_REPLAY, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY))


def counts(link) -> tuple:
    return (link.crc_flit_errors, link.crc_data_errors, link.replay_errors, link.recovery_errors)


def test_per_link_counts_are_read_again_only_when_a_total_moves(make_node, make_reader, patch_lib, clock):
    node = make_node("dgx-h100", load="training")
    lib = patch_lib(count={COUNTER, BATCH})
    reader = make_reader()
    first = reader.sample()
    # every link of every GPU: one error batch and a call per link; the cycle's own batch; and at
    # discovery the batch asking for the link count
    assert (lib.calls[COUNTER], lib.calls[BATCH]) == (GPUS * LINKS, 3 * GPUS)

    clock.advance(1.0)
    second = reader.sample()
    assert (lib.calls[COUNTER], lib.calls[BATCH]) == (GPUS * LINKS, 4 * GPUS)  # no total moved
    assert [counts(link) for gpu in second.gpus for link in gpu.nvlinks] == \
        [counts(link) for gpu in first.gpus for link in gpu.nvlinks] == [(0, 0, 0, 0)] * GPUS * LINKS

    node.inject(2, "nvlink-crc", rate=1000.0, link=3)
    node.inject(5, "nvlink-recovery", count=2, link=7)
    clock.advance(1.0)
    third = reader.sample()
    assert (lib.calls[COUNTER], lib.calls[BATCH]) == ((GPUS + 2) * LINKS, 5 * GPUS + 2)  # GPUs 2 and 5 only
    assert counts(third.gpus[2].nvlinks[3]) == driver_counts(2, 3)
    assert third.gpus[2].nvlinks[3].crc_data_errors > 0 and third.gpus[2].nvlinks[3].replay_errors > 0
    assert counts(third.gpus[5].nvlinks[7]) == driver_counts(5, 7) == (0, 0, 0, 2)
    assert [counts(link) for i, link in enumerate(third.gpus[2].nvlinks) if i != 3] == [(0, 0, 0, 0)] * (LINKS - 1)

    node.clear(2, "nvlink-crc")
    clock.advance(1.0)
    reader.sample()  # the totals moved once more (the errors of the last second)
    calls = (lib.calls[COUNTER], lib.calls[BATCH])
    clock.advance(1.0)
    fourth = reader.sample()
    assert (lib.calls[COUNTER], lib.calls[BATCH]) == (calls[0], calls[1] + GPUS)  # standing still: kept
    assert counts(fourth.gpus[2].nvlinks[3]) == driver_counts(2, 3)
    assert counts(fourth.gpus[5].nvlinks[7]) == (0, 0, 0, 2)


def test_every_link_is_read_again_after_the_reread_interval(make_node, make_reader, patch_lib, clock):
    make_node("dgx-h100", load="training")
    lib = patch_lib(count={COUNTER})
    reader = make_reader()
    reader.sample()
    clock.advance(ERRORS_REREAD_SECONDS - 1.0)
    reader.sample()
    assert lib.calls[COUNTER] == GPUS * LINKS
    clock.advance(1.0)
    reader.sample()
    assert lib.calls[COUNTER] == 2 * GPUS * LINKS


class CountingSession(NvmlSession):
    """Answers the error batch with (link * 10 + k) and the data CRC call with the link number (or
    ``error`` for both), counting per-link reads."""

    def __init__(self, error: Unavailable | None = None) -> None:
        super().__init__()
        self.reads = 0
        self.error = error

    def call(self, wrapper, *args, **kwargs):
        if self.error is not None:
            return self.error
        if wrapper == BATCH:
            self.reads += 1
            return [(field, link, pynvml.NVML_SUCCESS, link * 10 + fields.LINK_ERROR_FIELDS.index(field))
                    for field, link in args[1]]
        assert wrapper == COUNTER
        return args[1]


def batch(total):
    """A cycle's field values where every error total is ``total`` (None: not answered)."""
    return fields.FieldValues({} if total is None else {(field, 0): total for field in fields.ERROR_TOTALS})


EXPECTED = [(link * 10, link, link * 10 + 1, link * 10 + 2) for link in range(4)]


@pytest.mark.parametrize("total", [None, Unavailable("error", "field 45: NVML error 999")], ids=["not-supported", "error"])
def test_without_totals_every_link_is_read_every_cycle(total):
    session = CountingSession()
    last = None
    for cycle in range(3):
        links, last = read_nvlinks(session, None, 4, batch(total), last, now=float(cycle))
        assert [counts(link) for link in links] == EXPECTED
        assert last is None
    assert session.reads == 3


def test_counts_that_could_not_be_read_are_read_again_next_cycle():
    error = Unavailable("error", f"{COUNTER}: NVML_ERROR_UNKNOWN")
    session = CountingSession(error)
    links, last = read_nvlinks(session, None, 4, batch(7), None, now=0.0)
    assert [counts(link) for link in links] == [(error,) * 4] * 4 and last is None
    session.error = None
    links, last = read_nvlinks(session, None, 4, batch(7), last, now=1.0)
    assert [counts(link) for link in links] == EXPECTED
    assert last == LinkErrorCounts((7,) * 4, 1.0, tuple(EXPECTED))
    links, last = read_nvlinks(session, None, 4, batch(7), last, now=2.0)
    assert session.reads == 1 and [counts(link) for link in links] == EXPECTED
    _, last = read_nvlinks(session, None, 5, batch(7), last, now=3.0)  # a link more: read again
    assert session.reads == 2 and last is not None and len(last.counts) == 5
    _, last = read_nvlinks(session, None, 5, batch(8), last, now=4.0)  # a total moved: read again
    assert session.reads == 3


# -- the field-value rows ------------------------------------------------------------------------

VALUES = [  # (field id, value type, union member, value)
    (1, pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 41.5),
    (2, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 4_000_000_000),
    (3, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", 2**40),
    (4, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**63 + 5),
    (5, pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -(2**40)),
    (6, pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -7),
    (7, pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 65_000),
]


def test_field_value_rows_decode_every_value_type_and_each_fields_error(monkeypatch):
    asked = []

    def driver(handle, count, ref):
        array = ref._obj
        asked.append([(array[i].fieldId, array[i].scopeId) for i in range(count.value)])
        for i in range(count.value):
            entry = array[i]
            match = [v for v in VALUES if v[0] == entry.fieldId]
            if not match:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            _, value_type, member, value = match[0]
            entry.nvmlReturn, entry.valueType = pynvml.NVML_SUCCESS, value_type
            setattr(entry.value, member, value)
        return pynvml.NVML_SUCCESS

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: driver)
    session = NvmlSession()
    request = [field for field, *_ in VALUES] + [(99, 3)]
    for _ in range(2):  # the second call copies the request array built by the first
        rows = session.call("nvmlDeviceGetFieldValues", ctypes.c_void_p(1), request)
        assert rows == [(field, 0, pynvml.NVML_SUCCESS, value) for field, _, _, value in VALUES] + \
            [(99, 3, pynvml.NVML_ERROR_NOT_SUPPORTED, None)]
    assert asked == [[(field, 0) for field, *_ in VALUES] + [(99, 3)]] * 2
    parsed = fields.parse(rows)
    assert parsed.get(1) == 41.5 and parsed.get(6) == -7
    assert parsed.get(99, 3) == NOT_SUPPORTED
