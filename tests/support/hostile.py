"""Hostile uploads, built byte by byte: files whose headers lie or whose payload expands.

Each maker returns the bytes of a small file of one class the server must refuse cheaply:

* :func:`flac_bomb`: FLAC whose frames hold up to 65,535 samples each of silence, coded as
  CONSTANT subframes (3 bytes a frame), at any sample rate, with a STREAMINFO that may
  say another rate and length than the frames do (the FLAC format, https://xiph.org/flac/
  format.html: each frame header may carry its own sample rate);
* :func:`wav_bomb`: RIFF/WAVE whose ``fmt`` chunk says any rate and whose ``data`` chunk
  may claim any size;
* :func:`ogg_with_granules`: any Ogg file with every page's granule position rewritten
  (the length Ogg's header gives), CRCs recomputed;
* :func:`gif_bomb`, :func:`webp_canvas`, :func:`ico_with_png`, :func:`png_of_size`:
  images whose container and payload disagree, or whose size is far above the bound for
  a file of a few hundred bytes.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _utf8_number(value: int) -> bytes:
    """FLAC's frame number: UTF-8's variable-length coding of an integer."""
    if value < 0x80:
        return bytes([value])
    for length, top in ((2, 0xC0), (3, 0xE0), (4, 0xF0), (5, 0xF8), (6, 0xFC)):
        if value < 1 << (6 * (length - 1) + (7 - length)):  # the bits a length holds
            out = [top | (value >> (6 * (length - 1)))]
            out += [0x80 | ((value >> (6 * i)) & 0x3F) for i in range(length - 2, -1, -1)]
            return bytes(out)
    raise ValueError(value)


def flac_bomb(
    *,
    rate: int = 10,
    frames: int = 3,
    block: int = 65_535,
    header_rate: int | None = None,
    header_samples: int | None = None,
) -> bytes:
    """A FLAC file of ``frames`` frames of ``block`` silent 16-bit mono samples at ``rate`` Hz.

    Args:
        rate: the sample rate each frame says (in Hz, coded in the frame header when it
            differs from ``header_rate``).
        frames: how many frames.
        block: samples per frame, 16..65,535.
        header_rate: the rate STREAMINFO says (default ``rate``).
        header_samples: the total samples STREAMINFO says (default the true total; 0
            means unknown in FLAC).

    The default is the 81-byte file of issue 29: 10 Hz, three frames of 65,535 samples
    (5.5 hours, 1.26 GB as 16 kHz float32).
    """
    header_rate = rate if header_rate is None else header_rate
    total = frames * block if header_samples is None else header_samples
    info = struct.pack(">HH", block, block) + bytes(6)  # block sizes; frame sizes unknown
    packed = (header_rate << 44) | (0 << 41) | (15 << 36) | total  # mono, 16 bits
    info += packed.to_bytes(8, "big") + bytes(16)  # no MD5
    out = bytearray(b"fLaC" + bytes([0x80, 0, 0, 34]) + info)
    if rate == header_rate:
        rate_code, rate_bytes = 0, b""
    elif rate % 10 == 0 and rate // 10 < 65_536 and rate >= 65_536:
        rate_code, rate_bytes = 0b1110, struct.pack(">H", rate // 10)
    else:
        rate_code, rate_bytes = 0b1101, struct.pack(">H", rate)
    for number in range(frames):
        header = bytes([0xFF, 0xF8, (0b0111 << 4) | rate_code, 0b0000_1000])  # mono, 16 bits
        header += _utf8_number(number) + struct.pack(">H", block - 1) + rate_bytes
        header += bytes([_crc8(header)])
        frame = header + bytes([0b0000_0000, 0, 0])  # CONSTANT subframe, value 0
        out += frame + struct.pack(">H", _crc16(frame))
    return bytes(out)


def wav_bomb(
    *, rate: int = 1, samples: int = 100_000, data_size: int | None = None, bits: int = 8
) -> bytes:
    """A PCM WAV whose ``fmt`` says ``rate`` Hz, holding ``samples`` mono samples of silence.

    Args:
        rate: the sample rate the header says.
        samples: how many samples the file really holds.
        data_size: what the ``data`` chunk's size field says (default the truth;
            0xFFFFFFFF is a streaming writer's "unknown").
        bits: 8 or 16.
    """
    width = bits // 8
    payload = (b"\x80" if bits == 8 else b"\0\0") * samples
    size = len(payload) if data_size is None else data_size
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * width, width, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", size)
    return b"RIFF" + struct.pack("<I", min(len(body) + len(payload), 0xFFFFFFFF)) + body + payload


_OGG_CRC_TABLE = []
for _i in range(256):
    _r = _i << 24
    for _ in range(8):
        _r = ((_r << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if _r & 0x80000000 else (_r << 1) & 0xFFFFFFFF
    _OGG_CRC_TABLE.append(_r)


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _OGG_CRC_TABLE[((crc >> 24) & 0xFF) ^ byte]
    return crc


def ogg_with_granules(data: bytes, granule: int = 0) -> bytes:
    """``data`` (an Ogg file) with the granule position of every page after the headers
    set to ``granule`` (what Ogg's length is read from), each page's CRC recomputed."""
    out = bytearray()
    position = 0
    while position < len(data):
        if data[position : position + 4] != b"OggS":
            raise ValueError(f"no Ogg page at byte {position}")
        segments = data[position + 26]
        table = data[position + 27 : position + 27 + segments]
        end = position + 27 + segments + sum(table)
        page = bytearray(data[position:end])
        if struct.unpack("<q", page[6:14])[0] > 0:
            page[6:14] = struct.pack("<q", granule)
        page[22:26] = bytes(4)
        page[22:26] = struct.pack("<I", _ogg_crc(bytes(page)))
        out += page
        position = end
    return bytes(out)


def png_of_size(width: int, height: int) -> bytes:
    """A valid black RGB PNG of ``width`` x ``height``: a few hundred KB for 9000 x 9000."""
    compressor = zlib.compressobj(9)
    row = b"\0" + bytes(width * 3)
    parts = [compressor.compress(row) for _ in range(height)]
    parts.append(compressor.flush())

    def chunk(kind: bytes, body: bytes) -> bytes:
        checksum = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + checksum

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", b"".join(parts))
        + chunk(b"IEND", b"")
    )


def ico_with_png(png: bytes, stated: int = 256) -> bytes:
    """An ICO whose directory says ``stated`` x ``stated`` (0 is 256) but holds ``png``."""
    side = stated % 256
    entry = struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(png), 22)
    return struct.pack("<HHH", 0, 1, 1) + entry + png


def gif_bomb(screen: tuple[int, int], frame: tuple[int, int]) -> bytes:
    """A GIF whose logical screen is ``screen`` and whose first frame is ``frame`` pixels."""
    header = b"GIF89a" + struct.pack("<HHBBB", *screen, 0x80, 0, 0) + bytes(6)
    descriptor = b"," + struct.pack("<HHHHB", 0, 0, *frame, 0)
    return header + descriptor + bytes([2, 2, 0x4C, 0x01, 0]) + b";"


def webp_canvas(canvas: tuple[int, int], width: int = 100, height: int = 100) -> bytes:
    """A lossless WebP of ``width`` x ``height`` inside a VP8X container saying ``canvas``."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buffer, "WEBP", lossless=True)
    body = buffer.getvalue()[12:]
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4)
    vp8x += (canvas[0] - 1).to_bytes(3, "little") + (canvas[1] - 1).to_bytes(3, "little")
    payload = b"WEBP" + vp8x + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


def other_formats(width: int = 24, height: int = 16) -> dict[str, bytes]:
    """One small image in every format Pillow writes outside PNG, JPEG, WebP, GIF and BMP."""
    from PIL import Image

    Image.init()
    accepted = {"PNG", "JPEG", "WEBP", "GIF", "BMP"}
    image = Image.new("RGB", (width, height), (10, 120, 200))
    files = {}
    for name in sorted(set(Image.SAVE) - accepted):
        buffer = io.BytesIO()
        try:
            with warnings.catch_warnings():  # Pillow deprecates some (IM): still files to refuse
                warnings.simplefilter("ignore", DeprecationWarning)
                image.save(buffer, format=name)
        except Exception:  # a format that needs another mode, size or an external program
            continue
        files[name] = buffer.getvalue()
    return files


def _ogg_page(packet: bytes, sequence: int, granule: int, flags: int) -> bytes:
    """One Ogg page holding one whole packet (RFC 3533), its CRC filled in."""
    lacing = [255] * (len(packet) // 255) + [len(packet) % 255]
    page = bytearray(b"OggS" + bytes([0, flags]) + struct.pack("<qII", granule, 0x4154, sequence))
    page += bytes(4) + bytes([len(lacing)]) + bytes(lacing) + packet
    page[22:26] = struct.pack("<I", _ogg_crc(bytes(page)))
    return bytes(page)


def ogg_flac_bomb(*, stated_granule: int | None = None, **flac: int) -> bytes:
    """:func:`flac_bomb`'s frames in an Ogg container (the FLAC-in-Ogg mapping,
    https://xiph.org/flac/ogg_mapping.html), one frame a page.

    Args:
        stated_granule: the granule position (samples so far) every page says; default
            the truth.
        flac: :func:`flac_bomb`'s arguments.
    """
    native = flac_bomb(**flac)
    streaminfo = bytes([0, 0, 0, 34]) + native[8:42]  # FFmpeg wants no last-block flag
    block = struct.unpack(">H", native[8:10])[0]
    first = b"\x7fFLAC" + bytes([1, 0]) + struct.pack(">H", 0) + b"fLaC" + streaminfo
    pages = [_ogg_page(first, 0, 0, 0x02)]
    frames, position, number = native[42:], 0, 0
    while position < len(frames):
        end = frames.find(b"\xff\xf8", position + 2)
        end = len(frames) if end < 0 else end
        number += 1
        granule = number * block if stated_granule is None else stated_granule
        last = end == len(frames)
        pages.append(_ogg_page(frames[position:end], number, granule, 0x04 if last else 0))
        position = end
    return b"".join(pages)
