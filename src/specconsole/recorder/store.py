"""The recording's file format: blocks of zstd-compressed msgpack, appended, checked by CRC.

A recording is one file, or a folder of hourly segment files (``rec-YYYYmmdd-HHMMSS.screc``, the
console's: retention deletes whole segments). A file is a 8-byte magic, then blocks::

    header  "SCRB" | u32 length | f64 t0 | f64 t1 | u8 flags | u16 events | u32 crc32   (31 bytes)
    payload `length` bytes: a zstd stream's next piece, flushed as a whole zstd block

Every block (one flush, at most ``flush_s`` of records) decodes to a msgpack array of records.
A keyframe block (``flags`` bit 0) starts a new zstd frame and opens with records that rebuild
the whole fleet, so reading can start at any keyframe; the blocks in between share their frame's
window (a second's GPU readings compress against the previous second's: at 200 hosts a second is
~400 KiB of msgpack, which zlib's 32 KiB window could not reach back over). A block is written with
one ``write`` after the previous one, so a crash loses at most the block being written; reading
stops at the first block that is short, fails its CRC or does not decode, with one line saying
where.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zstandard

from specconsole.recorder.records import Record, encode_hook

MAGIC = b"SPECREC1"
HEADER = struct.Struct("<4sIddBHI")
BLOCK = b"SCRB"
KEYFRAME = 1
SEGMENT_GLOB = "rec-*.screc"


@dataclass(frozen=True)
class BlockInfo:
    path: Path
    offset: int  # of the payload
    length: int
    t0: float
    t1: float
    keyframe: bool
    events: int
    crc: int


class BlockWriter:
    """Appends blocks to one file (made with its magic when new)."""

    def __init__(self, path: Path, level: int = 3) -> None:
        self.path = path
        self.level = level
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if os.fstat(self.fd).st_size == 0:
            os.write(self.fd, MAGIC)
        self._zip: zstandard.ZstdCompressionObj | None = None
        self._encoder = msgspec.msgpack.Encoder(enc_hook=encode_hook)
        self.bytes = os.fstat(self.fd).st_size

    @property
    def needs_keyframe(self) -> bool:
        return self._zip is None

    def write(self, records: list[Record], *, keyframe: bool, events: int) -> int:
        """One block; ``keyframe`` starts a new zstd frame. Returns the bytes written."""
        if keyframe or self._zip is None:
            self._zip = zstandard.ZstdCompressor(level=self.level).compressobj()
            keyframe = True
        raw = self._encoder.encode(records)
        payload = self._zip.compress(raw) + self._zip.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        t0 = records[0][0] if records else time.time()
        t1 = max((r[0] for r in records), default=t0)
        head = HEADER.pack(BLOCK, len(payload), t0, t1, KEYFRAME if keyframe else 0, min(events, 0xFFFF),
                           zlib.crc32(payload))
        os.write(self.fd, head + payload)  # one write: a crash cuts at most this block
        self.bytes += len(head) + len(payload)
        return len(head) + len(payload)

    def close(self) -> None:
        os.close(self.fd)


def recording_files(path: Path) -> list[Path]:
    """A recording's files in order: the file itself, or a folder's segments."""
    if path.is_dir():
        return sorted(path.glob(SEGMENT_GLOB))
    return [path]


class Damaged(Exception):
    """Where reading a recording stopped (one line)."""


def scan(path: Path) -> tuple[list[BlockInfo], str | None]:
    """Every whole block's header (no payload is read); stops at the first short or foreign one.
    Returns the blocks and the one line saying where it stopped, if it did."""
    blocks: list[BlockInfo] = []
    problem = None
    for file in recording_files(path):
        try:
            with open(file, "rb") as f:
                data_size = os.fstat(f.fileno()).st_size
                if f.read(len(MAGIC)) != MAGIC:
                    problem = f"{file}: not a specconsole recording; skipped"
                    continue
                pos = len(MAGIC)
                while pos + HEADER.size <= data_size:
                    f.seek(pos)
                    magic, length, t0, t1, flags, events, crc = HEADER.unpack(f.read(HEADER.size))
                    if magic != BLOCK or pos + HEADER.size + length > data_size:
                        break
                    blocks.append(BlockInfo(file, pos + HEADER.size, length, t0, t1, bool(flags & KEYFRAME),
                                            events, crc))
                    pos += HEADER.size + length
                if pos != data_size:
                    problem = (f"{file}: damaged at byte {pos} of {data_size} (after "
                               f"{_when(blocks[-1].t1) if blocks else 'its start'}); the rest is skipped")
        except OSError as err:
            problem = f"{file}: cannot read ({err.strerror or err}); skipped"
    return blocks, problem


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


class BlockReader:
    """Decodes blocks in order from a keyframe (one zstd frame per keyframe)."""

    def __init__(self) -> None:
        self._unzip: zstandard.ZstdDecompressionObj | None = None
        self._decoder = msgspec.msgpack.Decoder()

    def read(self, block: BlockInfo) -> list[Record]:
        """The block's records; raises :class:`Damaged` when it fails its CRC or does not decode."""
        with open(block.path, "rb") as f:
            f.seek(block.offset)
            payload = f.read(block.length)
        if len(payload) != block.length or zlib.crc32(payload) != block.crc:
            raise Damaged(f"{block.path}: block at byte {block.offset} (at {_when(block.t0)}) is damaged; "
                          "the rest is skipped")
        if block.keyframe or self._unzip is None:
            if not block.keyframe:
                raise Damaged(f"{block.path}: block at byte {block.offset} has no keyframe before it")
            self._unzip = zstandard.ZstdDecompressor().decompressobj()
        try:
            records = self._decoder.decode(self._unzip.decompress(payload))
        except (zstandard.ZstdError, msgspec.DecodeError) as err:
            self._unzip = None
            raise Damaged(f"{block.path}: block at byte {block.offset} (at {_when(block.t0)}) does not decode "
                          f"({err}); the rest is skipped") from None
        if not isinstance(records, list):
            raise Damaged(f"{block.path}: block at byte {block.offset} holds no records; the rest is skipped")
        return records


def read_blocks(blocks: list[BlockInfo], start: int = 0) -> Iterator[tuple[BlockInfo, list[Record]]]:
    """Blocks from index ``start`` (a keyframe) on, decoded; :class:`Damaged` ends it."""
    reader = BlockReader()
    for block in blocks[start:]:
        yield block, reader.read(block)


def keyframe_before(blocks: list[BlockInfo], t: float) -> int:
    """The index of the last keyframe starting at or before ``t`` (the first keyframe if none)."""
    best = None
    for i, block in enumerate(blocks):
        if not block.keyframe:
            continue
        if block.t0 <= t or best is None:
            best = i
        if block.t0 > t:
            break
    return best if best is not None else 0
