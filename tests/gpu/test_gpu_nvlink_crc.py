"""NVLink data CRC counts: read per link only when their total field moved (``errors.read_nvlinks``),
and the session's field-value rows (``nvml._field_value_rows``) decoding every value type."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from runtimekit.gpu import fields
from runtimekit.gpu.errors import CRC_DATA_REREAD_SECONDS, CrcDataCounts, read_nvlinks
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import NOT_SUPPORTED, Unavailable

COUNTER = "nvmlDeviceGetNvLinkErrorCounter"
LINKS = 18  # dgx-h100


def crc_data(node_gpu: int, link: int) -> int:
    """The driver's own answer for one link, straight through pynvml."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(node_gpu)
    return pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)


def test_per_link_counts_are_read_again_only_when_the_total_moves(make_node, make_reader, patch_lib, clock):
    node = make_node("dgx-h100", load="training")
    lib = patch_lib(count={COUNTER})
    reader = make_reader()
    first = reader.sample()
    assert lib.calls[COUNTER] == 8 * LINKS  # the first cycle reads every link of every GPU

    clock.advance(1.0)
    second = reader.sample()
    assert lib.calls[COUNTER] == 8 * LINKS  # no total moved: no call
    assert [link.crc_data_errors for gpu in second.gpus for link in gpu.nvlinks] == \
        [link.crc_data_errors for gpu in first.gpus for link in gpu.nvlinks] == [0] * 8 * LINKS

    node.inject(2, "nvlink-crc", rate=1000.0, link=3)
    clock.advance(1.0)
    third = reader.sample()
    assert lib.calls[COUNTER] == 9 * LINKS  # GPU 2's total moved: its links only
    gpu = third.gpus[2]
    assert gpu.nvlinks[3].crc_data_errors == crc_data(2, 3) > 0
    assert [link.crc_data_errors for i, link in enumerate(gpu.nvlinks) if i != 3] == [0] * (LINKS - 1)

    node.clear(2, "nvlink-crc")
    clock.advance(1.0)
    reader.sample()  # the total moved once more (the errors of the last second)
    calls = lib.calls[COUNTER]
    clock.advance(1.0)
    fourth = reader.sample()
    assert lib.calls[COUNTER] == calls  # standing still again: no call, the count kept
    assert fourth.gpus[2].nvlinks[3].crc_data_errors == crc_data(2, 3)


def test_every_link_is_read_again_after_the_reread_interval(make_node, make_reader, patch_lib, clock):
    make_node("dgx-h100", load="training")
    lib = patch_lib(count={COUNTER})
    reader = make_reader()
    reader.sample()
    clock.advance(CRC_DATA_REREAD_SECONDS - 1.0)
    reader.sample()
    assert lib.calls[COUNTER] == 8 * LINKS
    clock.advance(1.0)
    reader.sample()
    assert lib.calls[COUNTER] == 16 * LINKS


class CountingSession(NvmlSession):
    """Answers the per-link counter with the link number (or ``error``), counting calls."""

    def __init__(self, error: Unavailable | None = None) -> None:
        super().__init__()
        self.calls = 0
        self.error = error

    def call(self, wrapper, *args, **kwargs):
        assert wrapper == COUNTER
        self.calls += 1
        return self.error if self.error is not None else args[1]


def batch(total):
    return fields.FieldValues({} if total is None else {(fields.CRC_DATA_TOTAL, 0): total})


@pytest.mark.parametrize("total", [None, Unavailable("error", "field 45: NVML error 999")], ids=["not-supported", "error"])
def test_without_a_total_every_link_is_read_every_cycle(total):
    session = CountingSession()
    last = None
    for cycle in range(3):
        links, last = read_nvlinks(session, None, 4, batch(total), last, now=float(cycle))
        assert [link.crc_data_errors for link in links] == [0, 1, 2, 3]
        assert last is None
    assert session.calls == 12


def test_a_link_that_could_not_be_read_is_read_again_next_cycle():
    error = Unavailable("error", f"{COUNTER}: NVML_ERROR_UNKNOWN")
    session = CountingSession(error)
    links, last = read_nvlinks(session, None, 4, batch(7), None, now=0.0)
    assert [link.crc_data_errors for link in links] == [error] * 4 and last is None
    session.error = None
    links, last = read_nvlinks(session, None, 4, batch(7), last, now=1.0)
    assert [link.crc_data_errors for link in links] == [0, 1, 2, 3]
    assert last == CrcDataCounts(7, 1.0, (0, 1, 2, 3))
    assert session.calls == 8
    links, last = read_nvlinks(session, None, 4, batch(7), last, now=2.0)
    assert session.calls == 8 and [link.crc_data_errors for link in links] == [0, 1, 2, 3]
    _, last = read_nvlinks(session, None, 5, batch(7), last, now=3.0)  # a link more: read again
    assert session.calls == 13 and last is not None and len(last.counts) == 5


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
