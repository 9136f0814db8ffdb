"""The gzip inflater: ISA-L when installed, the standard zlib otherwise; both read and refuse alike."""
import gzip
import io
import zlib

import pytest
from isal import isal_zlib

from MSUnmerged import dumpreader
from MSUnmerged.dumpreader import DumpError, iter_chunks

BODY = b"".join(b"/store/unmerged/E/P/T/p-v1/%04d/%06d.root\n" % (i // 100, i) for i in range(20000))


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    module = isal_zlib if request.param == "isal" else zlib
    monkeypatch.setattr(dumpreader, "INFLATER", module)
    return module


def read(data: bytes, chunk_bytes: int = 4096) -> bytes:
    return b"".join(iter_chunks(io.BytesIO(data), chunk_bytes))


def test_isal_is_the_default_when_installed():
    assert dumpreader.INFLATER is isal_zlib


def test_members_and_zero_padding(inflater):
    data = gzip.compress(BODY[:300_000]) + gzip.compress(BODY[300_000:]) + b"\0" * 100
    assert read(data) == BODY
    assert read(data, 777) == BODY


def test_chunks_stay_bounded_whatever_the_ratio(inflater):
    line = b"/store/unmerged/a/b/c/d/e.root\n"
    data = gzip.compress(line * 200_000, compresslevel=9)  # ~6 MB from a few KB
    chunks = list(iter_chunks(io.BytesIO(data), 64 * 1024))
    assert b"".join(chunks) == line * 200_000
    assert max(map(len, chunks)) <= 2 * 64 * 1024  # a chunk, plus the sniffed head and a partial line


@pytest.mark.parametrize("cut", [12, 1000, -9, -1])
def test_truncated_stream_is_one_clear_line(inflater, cut):
    data = gzip.compress(BODY)
    with pytest.raises(DumpError, match="^gzip stream is truncated or corrupt: [^\n]+$"):
        read(data[:cut])


@pytest.mark.parametrize("damage", ["crc", "length", "garbage after", "deflate data"])
def test_corrupt_stream_is_refused(inflater, damage):
    data = bytearray(gzip.compress(BODY))
    if damage == "crc":
        data[-8:-4] = bytes(4)
    elif damage == "length":
        data[-4:] = b"\xff" * 4
    elif damage == "garbage after":
        data += b"not a gzip member at all"
    else:
        data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    with pytest.raises(DumpError, match="^gzip stream is truncated or corrupt: [^\n]+$"):
        read(bytes(data))
