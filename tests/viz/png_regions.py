"""Counts drawn (non-white) pixels of a PNG inside rectangles.

Usage: png_regions.py SHOT.png NAME=x,y,w,h[@RRGGBB] [...]
Prints one line per region: NAME drawn_fraction total_pixels; with
@RRGGBB the fraction counts pixels of that colour (within 40 per channel)
instead of every non-white one. Decodes the PNG itself
(zlib + the five PNG filters) so the test needs nothing beyond python3.
"""
import struct
import sys
import zlib


def decode_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width = 8, [], None
    while pos < len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if ctype == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG: depth {depth} color {color}")
            bpp = 3 if color == 2 else 4
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    width, height, bpp, rows = decode_png(sys.argv[1])
    for spec in sys.argv[2:]:
        name, rect = spec.split("=")
        colour = None
        if "@" in rect:
            rect, hexcolour = rect.split("@")
            colour = tuple(int(hexcolour[i:i + 2], 16) for i in (0, 2, 4))
        x, y, w, h = (int(float(v)) for v in rect.split(","))
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(width, x + w), min(height, y + h)
        total = drawn = 0
        for row in rows[y0:y1]:
            for px in range(x0, x1):
                r, g, b = row[px * bpp:px * bpp + 3]
                total += 1
                if colour is not None:
                    if (abs(r - colour[0]) <= 40 and abs(g - colour[1]) <= 40
                            and abs(b - colour[2]) <= 40):
                        drawn += 1
                elif r < 235 or g < 235 or b < 235:
                    drawn += 1
        print(f"{name} {drawn / total if total else 0.0:.4f} {total}")


if __name__ == "__main__":
    main()
