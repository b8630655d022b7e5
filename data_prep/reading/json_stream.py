"""Read the elements of a JSON array one at a time, in bounded memory, whatever the file's size.

`json.load` would hold the whole file and every parsed row at once (several times the file's size). This
reads 1 MiB at a time and decodes one element with `raw_decode` as soon as the buffer holds all of it; the
buffer only grows past 1 MiB for an element that is itself larger. A syntax error ends the stream with one
problem naming the element (after it, nothing can be located reliably).
"""

import codecs
import json
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20
_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


class _Buffer:
    def __init__(self, f):
        self.f, self.text, self.pos, self.eof = f, "", 0, False
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def more(self) -> bool:
        """Append the next chunk (dropping what was consumed); False at the end of the file."""
        if self.eof:
            return False
        raw = self.f.read(CHUNK)
        self.eof = not raw
        self.text = self.text[self.pos :] + self.utf8.decode(raw, final=self.eof)
        self.pos = 0
        return bool(raw)

    def skip_ws(self) -> str:
        """The next non-whitespace character ('' at the end), not consumed."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def value(self):
        """Decode one JSON value at the cursor, reading more while it is incomplete."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise
            if end == len(self.text) and self.more():  # a number may go on in the next chunk
                continue
            self.pos = end
            return value


def first_char(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b" \t\r\n\xef\xbb\xbf")
    return head[:1].decode("latin-1")


def iter_array(path: Path) -> Iterator[tuple[str, object, str | None]]:
    """(location, element, None) per element, or a final (location, None, problem detail) on bad input."""
    with open(path, "rb") as f:
        buf = _Buffer(f)
        index = 0
        try:
            if buf.skip_ws() == "\ufeff":
                buf.pos += 1
            if buf.skip_ws() != "[":
                yield str(path), None, "not a JSON array"
                return
            buf.pos += 1
            while True:
                ch = buf.skip_ws()
                if ch == "]" and index == 0:
                    return
                if index:
                    if ch == "]":
                        return
                    if ch != ",":
                        yield f"{path}[{index}]", None, "not valid JSON (expected ',' or ']')"
                        return
                    buf.pos += 1
                    buf.skip_ws()
                yield f"{path}[{index}]", buf.value(), None
                index += 1
        except json.JSONDecodeError as exc:
            yield f"{path}[{index}]", None, f"not valid JSON ({exc.msg})"
        except UnicodeDecodeError as exc:
            yield f"{path}[{index}]", None, f"invalid UTF-8 ({exc.reason})"
