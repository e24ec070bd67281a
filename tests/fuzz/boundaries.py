"""Section boundaries of an engine file: where truncation tests cut it."""
from __future__ import annotations

import struct


def section_boundaries(data: bytes) -> list[int]:
    """Every offset where a header part, the table, or a section starts or ends (+-1)."""
    count, toff = struct.unpack_from("<IQ", data, 36)
    cuts = {0, 8, 12, 16, 32, 36, 40, 48, 56, 60, 64, toff, toff + 48 * count}
    for i in range(count):
        off, size = struct.unpack_from("<QQ", data, toff + 48 * i + 24)
        cuts |= {toff + 48 * i, off, off + size}
    return sorted({c + d for c in cuts for d in (-1, 0, 1) if 0 <= c + d < len(data)})
