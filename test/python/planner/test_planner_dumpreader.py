"""Streaming of plain, gzip and JSON dumps, and refusal of broken ones."""
import gzip
import io
import json

import pytest

from MSUnmerged.dumpreader import DumpError, NotADump, check_lines, iter_chunks

LINES = [f"/store/unmerged/E/P/T/p-v1/{i // 100:04d}/{i:06d}.root" for i in range(5000)]


def read_all(data: bytes, chunk_bytes: int = 1000) -> list[bytes]:
    chunks = list(iter_chunks(io.BytesIO(data), chunk_bytes))
    assert all(c.endswith(b"\n") for c in chunks)
    return b"".join(chunks).split(b"\n")[:-1]


def test_plain_text_in_whole_lines():
    assert read_all(("\n".join(LINES) + "\n").encode()) == [x.encode() for x in LINES]


def test_tiny_dump_gains_no_blank_line():
    assert list(iter_chunks(io.BytesIO(b"/store/a/b\n"))) == [b"/store/a/b\n"]


def test_last_line_without_newline():
    assert read_all(b"/a/b\n/c/d") == [b"/a/b", b"/c/d"]


def test_gzip_detected_by_magic_bytes(tmp_path):
    path = tmp_path / "dump.txt"  # the name says text; the content is gzip
    path.write_bytes(gzip.compress(("\n".join(LINES) + "\n").encode()))
    assert b"".join(iter_chunks(path, 777)).split(b"\n")[:-1] == [x.encode() for x in LINES]


def test_truncated_gzip_is_an_error():
    data = gzip.compress(("\n".join(LINES) + "\n").encode())
    with pytest.raises(DumpError, match="truncated or corrupt"):
        read_all(data[: len(data) // 2])


def test_corrupt_gzip_tail_is_an_error():
    data = bytearray(gzip.compress(("\n".join(LINES) + "\n").encode()))
    data[-6:-2] = b"\0\0\0\0"  # CRC/length trailer damaged
    with pytest.raises(DumpError):
        read_all(bytes(data))


def test_json_array_streamed_in_chunks():
    data = json.dumps(LINES, indent=1).encode()
    assert read_all(data, 512) == [x.encode() for x in LINES]


def test_json_empty_array():
    assert read_all(b"  [ ]  ") == []


@pytest.mark.parametrize("body, message", [
    (b'["/a/b", 3]', "element 1 is not a string"),
    (b'["/a/b", "/c/d"', "before its closing"),
    (b'["/a/b" "/c/d"]', "expected ','"),
    (b'["/a/b"] trailing', "after the closing"),
    (b'["/a/b", {"x": 1}]', "element 1 is not a string"),
])
def test_bad_json_names_the_problem(body, message):
    with pytest.raises(DumpError, match=message):
        read_all(body)


class Trickle:
    """A stream that gives one byte a read, whatever is asked: every buffer boundary gets its turn."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self.data.read(1)


def read_both_ways(body: bytes) -> list[bytes]:
    """The dump read whole and a byte at a time; both must agree."""
    whole = read_all(body)
    assert b"".join(iter_chunks(Trickle(body), 64, read_ahead=0)).split(b"\n")[:-1] == whole
    return whole


@pytest.mark.parametrize("tail", [b"", b"\n", b" \t\r\n" * 3000], ids=["none", "newline", "long"])
def test_json_with_trailing_whitespace_is_whole(tail):
    assert read_both_ways(json.dumps(LINES[:50]).encode() + tail) == [x.encode() for x in LINES[:50]]


@pytest.mark.parametrize("tail, quoted", [
    (b"  \n  garbage\n", "'garbage\\n'"),  # after whitespace: one byte read after ']' saw only a space
    (b' ["/store/unmerged/x/y"]', "'[\"/store/unmerged/x/y\"]'"),  # a second array
    (b"\n" * 5000 + b"<html>", "'<html>'"),  # far past the array, beyond the first read
    (b"\n\x0c", "'\\x0c'"),  # not JSON whitespace
], ids=["garbage after whitespace", "a second array", "far past the array", "form feed"])
def test_json_data_after_the_closing_bracket_is_named_in_one_line(tail, quoted):
    body = json.dumps(LINES[:50]).encode() + tail
    for stream in (io.BytesIO(body), Trickle(body)):
        with pytest.raises(DumpError) as err:
            list(iter_chunks(stream, 64, read_ahead=0))
        assert str(err.value) == f"JSON dump: data after the closing ']': {quoted}" and "\n" not in str(err.value)


@pytest.mark.parametrize("body", [b'{"result": ["/store/unmerged/a/b"]}', b'  "/store/unmerged/a"'])
def test_json_that_is_not_an_array_is_an_error(body):
    with pytest.raises(DumpError, match="not an array"):
        read_all(body)


def test_json_string_with_newline_stays_one_line():
    out = read_all(json.dumps(["/store/unmerged/a/b\n/store/unmerged/c"]).encode())
    assert out == [b"/store/unmerged/a/b\0/store/unmerged/c"]


@pytest.mark.parametrize("body,message", [
    (b"\xef\xbb\xbf\n  <!doctype html>\n<html>login</html>\n", "HTML"),
    (gzip.compress(b"<HTML><body>Sign in</body></HTML>\n", mtime=0), "HTML"),
    (b"/store/unmerged/a\n" + bytes(range(256)) * 8, "NUL bytes"),
    (bytes(range(128, 256)) * 40, "not UTF-8"),
])
def test_not_a_dump_is_recognised_from_its_start(body, message):
    with pytest.raises(NotADump, match=message):
        list(iter_chunks(io.BytesIO(body), read_ahead=0))


def test_a_dump_with_a_few_odd_lines_is_a_dump():
    body = b"".join(b"/store/unmerged/a/b/c/d/f%d.root\n" % i for i in range(100)) + b"/store/unmerged/\xff\xfe.root\n"
    assert b"".join(iter_chunks(io.BytesIO(body), read_ahead=0)) == body
    check_lines(101, {"non_utf8": 1, "dot_component": 60})  # odd LFNs under /store/unmerged are not foreign
    with pytest.raises(NotADump, match="51 of its 101 lines"):
        check_lines(101, {"relative_path": 50, "outside_unmerged": 1})
