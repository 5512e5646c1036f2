"""A small PNG bar chart drawn with the standard library alone (zlib for the image data, a 5×7
bitmap font for the labels), so the rehearsal's reports need no plotting library.

``write_burst_chart`` draws demo 2's chart: one panel per scenario, one stacked bar per state
(the start and after each step), burst pods on hybrid nodes at the bottom and on cloud-burst
nodes on top, each bar labelled with its counts — big enough to put on a slide.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Sequence

Color = tuple[int, int, int]

WHITE: Color = (255, 255, 255)
INK: Color = (33, 37, 41)
GRID: Color = (222, 226, 230)
HYBRID: Color = (31, 119, 180)
CLOUD: Color = (255, 127, 14)

# 5×7 glyphs, one string of five 0/1 per row; the labels are upper case.
_FONT = {
    " ": ["00000"] * 7,
    "0": ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    "1": ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    "2": ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    "3": ["11111", "00010", "00100", "00010", "00001", "10001", "01110"],
    "4": ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    "5": ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    "6": ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    "8": ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    "9": ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
    "A": ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
    "B": ["11110", "10001", "10001", "11110", "10001", "10001", "11110"],
    "C": ["01110", "10001", "10000", "10000", "10000", "10001", "01110"],
    "D": ["11100", "10010", "10001", "10001", "10001", "10010", "11100"],
    "E": ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
    "F": ["11111", "10000", "10000", "11110", "10000", "10000", "10000"],
    "G": ["01110", "10001", "10000", "10111", "10001", "10001", "01111"],
    "H": ["10001", "10001", "10001", "11111", "10001", "10001", "10001"],
    "I": ["01110", "00100", "00100", "00100", "00100", "00100", "01110"],
    "J": ["00111", "00010", "00010", "00010", "00010", "10010", "01100"],
    "K": ["10001", "10010", "10100", "11000", "10100", "10010", "10001"],
    "L": ["10000", "10000", "10000", "10000", "10000", "10000", "11111"],
    "M": ["10001", "11011", "10101", "10101", "10001", "10001", "10001"],
    "N": ["10001", "10001", "11001", "10101", "10011", "10001", "10001"],
    "O": ["01110", "10001", "10001", "10001", "10001", "10001", "01110"],
    "P": ["11110", "10001", "10001", "11110", "10000", "10000", "10000"],
    "Q": ["01110", "10001", "10001", "10001", "10101", "10010", "01101"],
    "R": ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
    "S": ["01111", "10000", "10000", "01110", "00001", "00001", "11110"],
    "T": ["11111", "00100", "00100", "00100", "00100", "00100", "00100"],
    "U": ["10001", "10001", "10001", "10001", "10001", "10001", "01110"],
    "V": ["10001", "10001", "10001", "10001", "10001", "01010", "00100"],
    "W": ["10001", "10001", "10001", "10101", "10101", "10101", "01010"],
    "X": ["10001", "10001", "01010", "00100", "01010", "10001", "10001"],
    "Y": ["10001", "10001", "10001", "01010", "00100", "00100", "00100"],
    "Z": ["11111", "00001", "00010", "00100", "01000", "10000", "11111"],
    ":": ["00000", "01100", "01100", "00000", "01100", "01100", "00000"],
    "-": ["00000", "00000", "00000", "11111", "00000", "00000", "00000"],
    "+": ["00000", "00100", "00100", "11111", "00100", "00100", "00000"],
    ".": ["00000", "00000", "00000", "00000", "00000", "01100", "01100"],
    "/": ["00000", "00001", "00010", "00100", "01000", "10000", "00000"],
    "(": ["00010", "00100", "01000", "01000", "01000", "00100", "00010"],
    ")": ["01000", "00100", "00010", "00010", "00010", "00100", "01000"],
    ">": ["01000", "00100", "00010", "00001", "00010", "00100", "01000"],
    "?": ["01110", "10001", "00001", "00010", "00100", "00000", "00100"],
}


class Canvas:
    def __init__(self, width: int, height: int, background: Color = WHITE):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: Color) -> None:
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(self.width, x + w), min(self.height, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        row = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            start = (yy * self.width + x0) * 3
            self.pixels[start:start + len(row)] = row

    def text(self, x: int, y: int, text: str, color: Color = INK, scale: int = 2) -> int:
        """Draws ``text`` with its top-left at (x, y); returns its width."""
        cursor = x
        for char in text.upper():
            glyph = _FONT.get(char, _FONT["?"])
            for row, bits in enumerate(glyph):
                for col, bit in enumerate(bits):
                    if bit == "1":
                        self.rect(cursor + col * scale, y + row * scale, scale, scale, color)
            cursor += 6 * scale
        return cursor - x

    @staticmethod
    def text_width(text: str, scale: int = 2) -> int:
        return len(text) * 6 * scale - scale if text else 0

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def burst_chart(title: str, panels: Sequence[tuple[str, Sequence[tuple[str, int, int]]]]) -> Canvas:
    """``panels``: (name, [(label, hybrid, cloud), ...]) per scenario."""
    bar, gap, pad = 56, 24, 52
    plot_h = 300
    widest = max((len(states) for _, states in panels), default=1)
    panel_w = widest * (bar + gap) + gap
    width = max(pad * 2 + len(panels) * (panel_w + pad), Canvas.text_width(title, 3) + 2 * pad)
    height = 70 + 50 + plot_h + 80
    canvas = Canvas(width, height)
    canvas.text(pad, 20, title, INK, 3)
    # The legend.
    lx = pad
    for name, color in (("HYBRID NODES", HYBRID), ("CLOUD-BURST NODES", CLOUD)):
        canvas.rect(lx, 64, 16, 16, color)
        lx += 24 + canvas.text(lx + 24, 65, name)
        lx += 24
    top = 124
    peak = max((h + c for _, states in panels for _, h, c in states), default=1) or 1
    scale = plot_h / max(peak, 1)
    for index, (name, states) in enumerate(panels):
        x0 = pad + index * (panel_w + pad)
        # Grid lines every 5 pods, the axis, the panel's name.
        for pods in range(0, peak + 1, 5):
            y = top + plot_h - round(pods * scale)
            canvas.rect(x0, y, panel_w, 1, GRID)
            canvas.text(x0 - 6 - Canvas.text_width(str(pods)), y - 6, str(pods), INK, 2)
        canvas.rect(x0, top + plot_h, panel_w, 2, INK)
        canvas.text(x0 + (panel_w - Canvas.text_width(name, 3)) // 2, top + plot_h + 40, name, INK, 3)
        for i, (label, hybrid, cloud) in enumerate(states):
            x = x0 + gap + i * (bar + gap)
            h_px, c_px = round(hybrid * scale), round(cloud * scale)
            base = top + plot_h
            canvas.rect(x, base - h_px, bar, h_px, HYBRID)
            canvas.rect(x, base - h_px - c_px, bar, c_px, CLOUD)
            counts = f"{hybrid}+{cloud}"
            canvas.text(x + (bar - Canvas.text_width(counts)) // 2, base - h_px - c_px - 20,
                        counts, INK, 2)
            canvas.text(x + (bar - Canvas.text_width(label)) // 2, base + 10, label, INK, 2)
    return canvas


def write_burst_chart(path: Path, title: str,
                      panels: Sequence[tuple[str, Sequence[tuple[str, int, int]]]]) -> None:
    path.write_bytes(burst_chart(title, panels).png())
