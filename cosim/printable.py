"""Text a terminal cannot be steered by: every string the commands echo (a key or a
label from a scenario or a study, a path, a value) goes out with its control characters
shown, never obeyed.

:func:`printable` writes each control character (C0, DEL, C1, and Unicode's format
characters such as the bidirectional overrides) as a Python escape (``\\x1b``,
``\\u202e``), keeping the line breaks and tabs a message is laid out with;
:class:`PrintableStream` applies it to everything written to a stream (the ``cosim``
command wraps its stdout and stderr in one, so no message, progress line or table can
clear the screen or retitle the terminal whatever a file holds). Standard library only.
"""

from __future__ import annotations

import codecs
import os
import sys
import unicodedata
from typing import Any, TextIO

__all__ = ["PrintableStream", "open_std_streams", "os_path", "printable", "utf8_text"]

_LAYOUT = frozenset("\n\t")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, keep: frozenset[str] | str = _LAYOUT) -> str:
    """``text`` with every control or format character but those in ``keep`` (line
    breaks and tabs) written as its escape: ``"a\\x1b[2Jb"`` -> ``"a\\\\x1b[2Jb"``."""
    if text.isprintable() and not any(c in text for c in "\x85\xa0"):
        return text
    return "".join(c if c in keep or c.isprintable() or c == " "
                   or unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") else _escape(c)
                   for c in text)


class PrintableStream:
    """A text stream that writes everything through :func:`printable` to ``stream``
    (``\\r`` kept too, for progress bars that redraw their line); every other attribute
    (``isatty``, ``fileno``, ``flush``, ``encoding``) is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text, keep="\n\t\r"))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def open_std_streams():
    """``(stdout, stderr)`` to write to. A standard descriptor the command was started
    without (``cosim inspect t.h5 >&-``: Python then has ``sys.stdout = None``) is
    opened onto ``/dev/null`` first, so that no file the command opens later (a trace,
    a log) takes its number and receives what is printed; its stream writes there."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            new = os.open(os.devnull, os.O_RDWR)
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
    out, err = sys.stdout, sys.stderr
    for stream in (out, err):  # UTF-8 whatever the locale (LC_ALL=C: ASCII, and a name
        # holding "é" would end the command with a UnicodeEncodeError); the bytes of a
        # path the locale could not decode go out as they came in (surrogateescape)
        encoding = getattr(stream, "encoding", None) or "utf-8"
        if hasattr(stream, "reconfigure") and codecs.lookup(encoding).name != "utf-8":
            stream.reconfigure(encoding="utf-8", errors="surrogateescape")
    if out is None:
        out = sys.stdout = open(os.devnull, "w", encoding="utf-8")
    if err is None:
        err = sys.stderr = open(os.devnull, "w", encoding="utf-8")
    return out, err


def utf8_text(text: str) -> str:
    """``text`` as it is stored in a trace, UTF-8 whatever the locale: a string holding
    bytes the locale could not decode (a path typed under ``LC_ALL=C``, where Python
    keeps them as surrogate escapes) gets them read as UTF-8 (``"donn\\udcc3\\udca9es"``
    -> ``"données"``). :class:`UnicodeDecodeError` when they are not UTF-8."""
    if not any("\udc80" <= c <= "\udcff" for c in text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8")


def os_path(text: str) -> str:
    """The path the system is given for ``text``, a path stored as UTF-8 text: its UTF-8
    bytes as this process's file-system encoding reads them (the same string in a UTF-8
    locale; surrogate escapes under ``LC_ALL=C``, which the system gets back as those
    bytes)."""
    return os.fsdecode(text.encode("utf-8", "surrogateescape"))
