"""Run a command under a real terminal (a pty of a given size) and read the screen it leaves, as a person
would: a small emulator of what Rich writes (text, wrapping at the width, carriage returns, cursor moves,
line and screen erasing; colours ignored). A pty is always there, unlike tmux."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SEQUENCE = re.compile(
    r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b[=>]"
)


def run(code: str, *, columns: int = 80, rows: int = 40, timeout: float = 180.0) -> tuple[list[str], int]:
    """Python ``code`` run with its standard streams on a ``columns`` x ``rows`` pty: the screen's lines
    (scrolled-off ones kept, trailing blanks cut) and the exit code."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "TERM": "xterm-256color",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_METRICS_DISABLED": "true",
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
    }
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        close_fds=True,
    )
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            received += data
        elif child.poll() is not None:
            break
    else:
        child.kill()
    os.close(master)
    code_ = child.wait(timeout=10)
    return screen(received.decode("utf-8", "replace"), columns), code_


def screen(output: str, columns: int) -> list[str]:  # noqa: PLR0915 - one loop over a small state machine
    """The lines ``output`` leaves on a terminal ``columns`` wide (no bottom: scrolled lines stay)."""
    lines: list[list[str]] = [[]]
    row = col = 0
    position = 0
    pending_wrap = False

    def put(char: str) -> None:
        nonlocal row, col, pending_wrap
        if pending_wrap:
            row, col, pending_wrap = row + 1, 0, False
        while len(lines) <= row:
            lines.append([])
        line = lines[row]
        while len(line) < col:
            line.append(" ")
        if col < len(line):
            line[col] = char
        else:
            line.append(char)
        col += 1
        if col >= columns:
            col, pending_wrap = columns - 1, True

    while position < len(output):
        found = _SEQUENCE.match(output, position)
        if found:
            position = found.end()
            args, command = found.group(1), found.group(2)
            if command is None:
                continue
            count = int(args) if args and args.isdigit() else 1
            pending_wrap = False
            if command == "A":
                row = max(0, row - count)
            elif command == "B":
                row += count
            elif command == "C":
                col = min(columns - 1, col + count)
            elif command == "D":
                col = max(0, col - count)
            elif command == "G":
                col = count - 1
            elif command == "K":
                while len(lines) <= row:
                    lines.append([])
                if args in ("", "0"):
                    del lines[row][col:]
                elif args == "2":
                    lines[row] = []
            elif command == "J" and args in ("", "0"):
                while len(lines) <= row:
                    lines.append([])
                del lines[row][col:]
                del lines[row + 1 :]
            continue
        char = output[position]
        position += 1
        if char == "\r":
            col, pending_wrap = 0, False
        elif char == "\n":
            row, col, pending_wrap = row + 1, 0, False
            while len(lines) <= row:
                lines.append([])
        elif char == "\b":
            col = max(0, col - 1)
        elif char >= " " or char == "\t":
            put(" " if char == "\t" else char)
    text = ["".join(line).rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    return text
