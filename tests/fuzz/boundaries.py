"""Section boundaries of an engine file: where truncation tests cut it, and
the padding and tail that no CRC covers, where corruption tests write."""
from __future__ import annotations

import struct
import zlib


def _table(data: bytes) -> list[tuple[int, int]]:
    count, toff = struct.unpack_from("<IQ", data, 36)
    return [struct.unpack_from("<QQ", data, toff + 48 * i + 24) for i in range(count)]


def section_boundaries(data: bytes) -> list[int]:
    """Every offset where a header part, the table, or a section starts or ends (+-1)."""
    count, toff = struct.unpack_from("<IQ", data, 36)
    cuts = {0, 8, 12, 16, 32, 36, 40, 48, 56, 60, 64, toff, toff + 48 * count}
    for i, (off, size) in enumerate(_table(data)):
        cuts |= {toff + 48 * i, off, off + size}
    return sorted({c + d for c in cuts for d in (-1, 0, 1) if 0 <= c + d < len(data)})


def padding_spans(data: bytes) -> list[tuple[int, int]]:
    """The [start, end) gaps between the table and the first section and between sections."""
    count, toff = struct.unpack_from("<IQ", data, 36)
    end, spans = toff + 48 * count, []
    for off, size in sorted(_table(data)):
        if off > end:
            spans.append((end, off))
        end = max(end, off + size)
    return spans


def with_size(data: bytes, size: int) -> bytes:
    """`data` with its header's file size set to `size` and the header CRC fixed."""
    d = bytearray(data)
    struct.pack_into("<Q", d, 48, size)
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    return bytes(d)


def slack_corruptions(data: bytes) -> dict[str, bytes]:
    """Engines that differ from `data` only where no checksum looks: nonzero padding
    (first, middle and last byte of every gap) and bytes after the last section (with
    the header's file size and CRC fixed to match, and without)."""
    out = {}
    for start, end in padding_spans(data):
        for pos in sorted({start, (start + end) // 2, end - 1}):
            for value in (0x01, 0xFF):
                d = bytearray(data)
                d[pos] = value
                out[f"padding_{pos}_{value:02x}"] = bytes(d)
    for tail in (b"\0", b"\xff", b"\0" * 256, b"\xff" * 4096):
        out[f"tail_{len(tail)}_{tail[0]:02x}"] = with_size(data + tail, len(data) + len(tail))
        out[f"tail_{len(tail)}_{tail[0]:02x}_unfixed"] = data + tail
    return out
