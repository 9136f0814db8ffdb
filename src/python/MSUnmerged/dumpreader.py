"""Streams a ConMon dump (plain text, gzip or a JSON array of strings) as chunks of whole lines."""
from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import zlib
from typing import Any, BinaryIO, Iterable, Iterator, Mapping, Union

from MSUnmerged import lfn

try:  # ISA-L inflates about twice as fast as zlib; the standard zlib serves when it is not installed
    from isal import isal_zlib as INFLATER  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    INFLATER = zlib

CHUNK_BYTES = 4 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"
GZIP_WBITS = 31  # zlib's window bits for a gzip wrapper (header and CRC/length trailer checked)
INFLATE_INPUT_BYTES = 1024 * 1024
JSON_SPACE = " \t\r\n"  # the whitespace JSON allows between tokens (RFC 8259)
QUOTED_CHARS = 40  # of what follows a JSON dump's closing ']', in its error


class DumpError(ValueError):
    """The dump cannot be read to its end: truncated, corrupt, or not a dump at all."""


class NotADump(DumpError):
    """The input is no dump at all: an HTML page, binary data, or mostly lines that are not LFNs."""


Source = Union[str, os.PathLike, BinaryIO]
SNIFF_BYTES = 4096


def check_head(head: bytes) -> None:
    """Raise NotADump when the start of the (decompressed) input is HTML or binary."""
    sample = head[:SNIFF_BYTES]
    if sample.lstrip(b"\xef\xbb\xbf \t\r\n")[:9].lower().startswith((b"<!doctype", b"<html", b"<?xml")):
        raise NotADump("it starts like an HTML or XML page (a login or error page?)")
    if b"\0" in sample:
        raise NotADump("it holds NUL bytes: binary data")
    undecodable = len(sample) - len(sample.decode("utf-8", errors="ignore").encode("utf-8"))
    if undecodable * 10 > len(sample):
        raise NotADump(f"{undecodable} of its first {len(sample)} bytes are not UTF-8: binary data")


# Invalid-line reasons that say "not an LFN under /store/unmerged/ at all" (the others are odd LFNs).
FOREIGN_LINES = (lfn.OUTSIDE_UNMERGED, lfn.RELATIVE, lfn.CONTROL_OR_SPACE, lfn.NON_UTF8)


def check_lines(lines: int, invalid: Mapping[str, int]) -> None:
    """Raise NotADump when more than half of the lines are not LFNs under /store/unmerged/ (e.g. /etc/passwd)."""
    foreign = sum(invalid.get(reason, 0) for reason in FOREIGN_LINES)
    if foreign * 2 > lines:
        raise NotADump(f"{foreign:,} of its {lines:,} lines are not LFNs under /store/unmerged/")


def iter_chunks(source: Source, chunk_bytes: int = CHUNK_BYTES, read_ahead: int = 2) -> "DumpChunks":
    """Yield chunks of the dump, each made of whole lines and ending with b'\\n' (see DumpChunks).

    The format is detected from the content (gzip magic bytes, a leading '['), never from a
    file name. Up to `read_ahead` chunks are read (and decompressed) by a background thread,
    which overlaps with planning because zlib and file reads release the GIL. Memory is
    bounded by (`read_ahead` + 1) * `chunk_bytes` plus the longest line.
    """
    return DumpChunks(source, chunk_bytes, read_ahead)


class DumpChunks:
    """The chunks of a dump (an iterator), and `hexdigest()`: the sha256 of the dump's bytes as read from its
    source, compressed as served for a gzip dump, to the source's end (complete once the chunks are consumed).
    The bytes are hashed by the thread that reads them, in blocks that release the GIL."""

    def __init__(self, source: Source, chunk_bytes: int = CHUNK_BYTES, read_ahead: int = 2) -> None:
        self._hash = hashlib.sha256()
        self._chunks = self._read(source, chunk_bytes, read_ahead)

    def __iter__(self) -> "DumpChunks":
        return self

    def __next__(self) -> bytes:
        return next(self._chunks)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def _read(self, source: Source, chunk_bytes: int, read_ahead: int) -> Iterator[bytes]:
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as fh:
                yield from self._read(fh, chunk_bytes, read_ahead)
            return
        chunks = _chunks(_Hashed(source, self._hash), chunk_bytes)
        yield from read_ahead_thread(chunks, read_ahead) if read_ahead > 0 else chunks


def _chunks(source: "_Hashed", chunk_bytes: int) -> Iterator[bytes]:
    """The dump's chunks, read from `source` in this thread; then the rest of the source, for its digest."""
    head = source.read(2)
    stream: Any = _Prepend(head, source)
    if head == GZIP_MAGIC:
        stream = _Inflate(stream, INFLATER)
    try:
        first = _first_non_space(stream)
        check_head(first)
        lead = first.lstrip()[:1]
        if lead in (b"{", b'"'):
            raise DumpError(f"dump starts with {lead.decode()!r}: JSON that is not an array of LFNs")
        if lead == b"[":
            yield from _json_chunks(first, stream, chunk_bytes)
        else:
            yield from _line_chunks(first, stream, chunk_bytes)
    except (EOFError, zlib.error, INFLATER.error) as exc:
        raise DumpError(f"gzip stream is truncated or corrupt: {exc}") from None
    source.drain()


class _Hashed:
    """A read-only stream that hashes the bytes it reads from another."""

    def __init__(self, stream: BinaryIO, digest: Any) -> None:
        self._stream = stream
        self._digest = digest

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._digest.update(data)
        return data

    def drain(self) -> None:
        """Read (and hash) what is left: the bytes after the dump's end that its reading does not need."""
        while self.read(INFLATE_INPUT_BYTES):
            pass

    def readable(self) -> bool:
        return True


_DONE = object()


def read_ahead_thread(chunks: Iterable[bytes], depth: int = 2) -> Iterator[bytes]:
    """Run `chunks` in a thread, `depth` items ahead; its exceptions are raised here."""
    q: "queue.Queue[object]" = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for chunk in chunks:
                while not stop.is_set():
                    try:
                        q.put(chunk, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as exc:  # handed to the consumer, which raises it
            q.put(exc)

    thread = threading.Thread(target=produce, name="dump-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join(5)


class _Prepend:
    """A read-only stream that first returns some bytes already consumed from another."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            if size < 0:
                return head + self._stream.read()
            return head + self._stream.read(max(0, size - len(head)))
        return self._stream.read(size)

    def readable(self) -> bool:
        return True


class _Inflate:
    """A read-only stream of the decompressed content of a gzip stream (one or more members).

    Each read inflates up to `size` bytes in large calls that release the GIL; compressed
    input is read `INFLATE_INPUT_BYTES` at a time, so memory stays bounded whatever the ratio.
    """

    def __init__(self, raw: Any, inflater: Any) -> None:
        self._raw = raw
        self._inflater = inflater
        self._member = inflater.decompressobj(GZIP_WBITS)
        self._pending = b""  # compressed bytes not yet inflated
        self._between_members = False  # the last member ended; only padding or a new member may follow

    def read(self, size: int) -> bytes:
        out: list[bytes] = []
        have = 0
        while have < size:
            if not self._pending:
                self._pending = self._raw.read(INFLATE_INPUT_BYTES)
                if not self._pending:
                    if self._between_members:
                        break
                    raise EOFError("the compressed stream ends inside a member")
            if self._between_members:
                self._pending = self._pending.lstrip(b"\0")  # zero padding after a member, as gzip allows
                if not self._pending:
                    continue
                self._between_members = False
            piece = self._member.decompress(self._pending, size - have)
            self._pending = self._member.unconsumed_tail
            if self._member.eof:
                self._pending = self._member.unused_data
                self._member = self._inflater.decompressobj(GZIP_WBITS)
                self._between_members = True
            if piece:
                out.append(piece)
                have += len(piece)
        return out[0] if len(out) == 1 else b"".join(out)

    def readable(self) -> bool:
        return True


def _first_non_space(stream: BinaryIO) -> bytes:
    """Read until the first non-whitespace byte (inclusive); b'' for an empty dump."""
    buf = b""
    while True:
        block = stream.read(4096)
        if not block:
            return buf
        buf += block
        if buf.strip():
            return buf


def _line_chunks(first: bytes, stream: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    rest = first
    while True:
        block = stream.read(chunk_bytes)
        if not block:
            break
        cut = block.rfind(b"\n") + 1
        if not cut:
            rest += block
            continue
        # One copy at most: a whole block passes through as it is; otherwise the partial line left
        # from the last block and this block's whole lines are joined from a view, not a slice.
        yield block if not rest and cut == len(block) else b"".join((rest, memoryview(block)[:cut]))
        rest = block[cut:]
    if rest:
        yield rest if rest.endswith(b"\n") else rest + b"\n"


def _json_chunks(first: bytes, stream: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    """Parse a JSON array of strings incrementally and re-emit it as newline-separated lines."""
    decoder = json.JSONDecoder()
    text = first.decode("utf-8", errors="surrogateescape")
    pos = text.index("[") + 1
    out: list[str] = []
    out_len = 0
    index = 0
    expect_value = True
    eof = False
    while True:
        # Skip separators; keep enough text buffered to decode the next element.
        while pos < len(text) and text[pos] in JSON_SPACE:
            pos += 1
        if pos >= len(text):
            if eof:
                raise DumpError(f"JSON dump ends before its closing ']' after {index} elements")
            block = stream.read(chunk_bytes)
            if not block:
                eof = True
                continue
            text = text[pos:] + block.decode("utf-8", errors="surrogateescape")
            pos = 0
            continue
        ch = text[pos]
        if ch == "]" and (not expect_value or index == 0):
            break
        if ch == "," and not expect_value:
            expect_value = True
            pos += 1
            continue
        if not expect_value:
            raise DumpError(f"JSON dump: expected ',' or ']' after element {index}, got {ch!r}")
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if not eof:
                block = stream.read(chunk_bytes)
                if block:
                    text = text[pos:] + block.decode("utf-8", errors="surrogateescape")
                    pos = 0
                    continue
            raise DumpError(f"JSON dump: element {index} is not valid JSON: {exc.msg}") from None
        if not isinstance(value, str):
            raise DumpError(f"JSON dump: element {index} is not a string: {type(value).__name__}")
        out.append(value)
        out_len += len(value)
        index += 1
        pos = end
        expect_value = False
        if out_len >= chunk_bytes:
            yield _encode_lines(out)
            out, out_len = [], 0
    _nothing_after(text[pos + 1:], stream, chunk_bytes)
    if out:
        yield _encode_lines(out)


def _nothing_after(rest: str, stream: BinaryIO, chunk_bytes: int) -> None:
    """Only JSON whitespace may follow the array's closing ']', to the end of the dump: DumpError quotes what does."""
    while True:
        extra = rest.lstrip(JSON_SPACE)
        if extra:
            while len(extra) < QUOTED_CHARS and (more := stream.read(QUOTED_CHARS)):  # enough to recognise it
                extra += more.decode("utf-8", errors="surrogateescape")
            raise DumpError(f"JSON dump: data after the closing ']': {extra[:QUOTED_CHARS]!r}")
        block = stream.read(chunk_bytes)
        if not block:
            return
        rest = block.decode("utf-8", errors="surrogateescape")


def _encode_lines(values: list[str]) -> bytes:
    # A value holding a newline would become two lines: a NUL in its place makes it one invalid line.
    joined = "\n".join(v.replace("\n", "\0") if "\n" in v else v for v in values) + "\n"
    return joined.encode("utf-8", errors="surrogateescape")
