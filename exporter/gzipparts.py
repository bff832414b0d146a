"""The gzip variant of an exposition, compressed one part at a time (a family, or a chunk of a big
family: ``render.py``) and reused for parts that did not change.

Most of a scrape's bytes belong to families whose samples are the same as at the last render
(process memory, CPU seconds refreshed every few seconds, identities); compressing all of them
again at every render was a fifth of its cost. ``GzipParts`` compresses each part (one family's
bytes, or a chunk of them: ``Renderer.render_parts``) as deflate blocks ending in a full flush
(``Z_FULL_FLUSH``: byte-aligned, with no back-reference into the parts before it), so the
compressed bytes of a part decode without what came before them and can be spliced into the next
render's stream. The result is ONE gzip member (RFC 1952: header, the parts' deflate blocks, a
final empty block, CRC-32 and length of the whole body), which every gzip reader decodes to the
plain body; only the compressed bytes differ from compressing the body whole (larger, as no match
reaches across parts: ~74 KB instead of ~51 KB at 512 processes, whose process families are
chunked). Level 1: a third of level 6's CPU for ~15 % more bytes on this repetitive text.

The compressed parts are kept by the parts' bytes (the renderer hands back the very same bytes
object for an unchanged family, whose hash Python keeps), for the last render only.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Sequence

LEVEL = 1
# RFC 1952 header: magic, deflate, no flags, mtime 0 (the bytes are a pure function of the body),
# XFL 4 (fastest compression), OS 255 (unknown) — what gzip.compress(body, 1, mtime=0) writes.
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"


def _compressor() -> zlib._Compress:
    return zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)


class GzipParts:
    """Gzip of joined parts, reusing the compressed bytes of parts seen in the last call."""

    def __init__(self) -> None:
        self._chunks: dict[bytes, bytes] = {}
        self._lock = threading.Lock()  # two renders (two views) may compress at once

    def compress(self, parts: Sequence[bytes]) -> bytes:
        """One gzip member whose decompressed content is ``b"".join(parts)``."""
        with self._lock:
            previous = self._chunks
        current: dict[bytes, bytes] = {}
        compressor = _compressor()
        out = [HEADER]
        crc = 0
        size = 0
        for part in parts:
            if not part:
                continue
            chunk = current.get(part)
            if chunk is None:
                chunk = previous.get(part)
                if chunk is None:
                    # After a full flush the compressor keeps no history: the next part's blocks
                    # stand alone, as they would after a part taken from the cache.
                    chunk = compressor.compress(part) + compressor.flush(zlib.Z_FULL_FLUSH)
                current[part] = chunk
            out.append(chunk)
            crc = zlib.crc32(part, crc)
            size += len(part)
        out.append(compressor.flush(zlib.Z_FINISH))  # the final (empty) block
        out.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
        with self._lock:
            self._chunks = current
        return b"".join(out)
