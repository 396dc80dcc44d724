"""Write an NNEF asset (``graph.nnef``, ``.dat`` files, fragments) as a folder, .tar or .tgz.

The output form follows the name: ``*.tgz`` / ``*.tar.gz`` give a gzip tar, ``*.tar`` a plain
tar, anything else a folder. Files sit at the archive root: tract 0.23.9 does not find
``graph.nnef`` under a top-level folder inside the archive. A name may hold ``/`` (a
variable labelled ``encoder/w`` lives in ``encoder/w.dat``).

A file's content is bytes, or a streamed file (an object with ``size`` and ``chunks()``,
such as :class:`fx2nnef.nnef_emit.dat.DatFile`) whose bytes are read piece by piece while
written: an archive is written sequentially, entry by entry, and no whole copy of the
weights is made in memory.

Archives are byte-identical for identical input and level: entries sorted by name, mtime 0,
uid/gid 0, no user or group names, mode 0644, gzip header with mtime 0 and no file name.

Writes are atomic: :func:`stage_asset` writes everything once to a hidden temporary sibling
of the final path (same folder, so that the final rename is atomic), where it can be checked;
:meth:`StagedAsset.commit` renames it into place. An error leaves neither a partial asset nor
a temporary file. An existing folder is replaced only after the new one is complete.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import struct
import tarfile
import tempfile
import zlib
from collections.abc import Mapping
from typing import Callable, Iterator, Optional, Protocol, Union

from fx2nnef.errors import InvalidArgumentError

GZIP_SUFFIXES = (".tgz", ".tar.gz")
TAR_SUFFIXES = (".tar",)
# Compressed forms tract does not read: refused rather than written as a folder by that name.
_REFUSED_SUFFIXES = (".zip", ".gz", ".bz2", ".xz", ".zst", ".tbz", ".tbz2", ".txz")
_FILE_MODE = 0o644
# Float weights barely compress (random f32: 7 % smaller at any level) while deflate runs at
# about 35 MB/s on them; level 0 (stored blocks) writes at disk speed.
DEFAULT_COMPRESSION_LEVEL = 0
_COPY_BUFFER = 1 << 20
_TEMP_PREFIX = ".fx2nnef-"


class StreamedFile(Protocol):
    """A file whose bytes are produced while it is written."""

    size: int

    def chunks(self) -> Iterator[Union[bytes, memoryview]]:
        ...


Content = Union[bytes, bytearray, memoryview, StreamedFile]


def write_asset(files: Mapping[str, Content], out_path: str | os.PathLike, *,
                compression_level: Optional[int] = None,
                on_bytes: Optional[Callable[[int], None]] = None) -> pathlib.Path:
    """Write ``files`` (relative name -> content) to ``out_path`` and return that path.

    ``compression_level`` (0-9, default :data:`DEFAULT_COMPRESSION_LEVEL`) applies to gzip
    archives; ``on_bytes(n)`` is called as file bytes are written (progress).
    Raises InvalidArgumentError, before writing anything, for bad names or contents, a
    parent folder that does not exist or is a file, or a target of the other kind (a file
    where a folder goes, or the reverse).
    """
    staged = stage_asset(files, out_path, compression_level=compression_level, on_bytes=on_bytes)
    return staged.commit()


def stage_asset(files: Mapping[str, Content], out_path: str | os.PathLike, *,
                compression_level: Optional[int] = None,
                on_bytes: Optional[Callable[[int], None]] = None) -> "StagedAsset":
    """Write ``files`` once, to a hidden temporary sibling of ``out_path`` of the same form
    (its name ends like ``out_path``); :meth:`StagedAsset.commit` then moves it into place.

    Same arguments and errors as :func:`write_asset`; nothing is left behind on an error.
    """
    path = pathlib.Path(out_path)
    level = check_compression_level(compression_level)
    entries = _checked_entries(files)
    kind = asset_kind(path)
    _check_target(path, kind)
    temp = None
    try:
        if kind == "folder":
            temp = pathlib.Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, suffix="-" + path.name, dir=path.parent))
            _write_folder(entries, temp, on_bytes)
            os.chmod(temp, 0o755)
        else:
            fd, name = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix="-" + path.name, dir=path.parent)
            temp = pathlib.Path(name)
            with os.fdopen(fd, "wb") as handle:
                _write_tar(entries, handle, level if kind == "tgz" else None, on_bytes)
            os.chmod(temp, _FILE_MODE)
    except OSError as error:
        _remove_quietly(temp)
        raise _write_error(path, error) from error
    except BaseException:
        _remove_quietly(temp)
        raise
    return StagedAsset(temp, path)


class StagedAsset:
    """A complete asset at a temporary sibling ``path`` of its destination ``final``.

    Use as a context manager: leaving the block without :meth:`commit` (e.g. on an error)
    deletes it.
    """

    def __init__(self, path: pathlib.Path, final: pathlib.Path):
        self.path, self.final = path, final
        self.done = False

    def commit(self) -> pathlib.Path:
        """Rename the asset onto ``final`` (replacing an old folder only once this succeeds)."""
        try:
            if self.path.is_dir():
                _move_folder_into_place(self.path, self.final)
            else:
                os.replace(self.path, self.final)
        except OSError as error:
            self.discard()
            raise _write_error(self.final, error) from error
        except BaseException:
            self.discard()
            raise
        self.done = True
        return self.final

    def move_to(self, destination: pathlib.Path) -> pathlib.Path:
        """Move the asset to ``destination`` instead (e.g. into a debug bundle)."""
        shutil.move(str(self.path), str(destination))
        self.done = True
        return destination

    def discard(self) -> None:
        """Delete the temporary asset (nothing is left at ``final``)."""
        if not self.done:
            _remove_quietly(self.path)
            self.done = True

    def __enter__(self) -> "StagedAsset":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def check_compression_level(level: object) -> int:
    """``level`` as an int in 0-9 (None gives the default); InvalidArgumentError otherwise."""
    if level is None:
        return DEFAULT_COMPRESSION_LEVEL
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise InvalidArgumentError(
            f"compression_level must be an int from 0 (no compression, fastest; the default) to 9 "
            f"(smallest, slowest), got {level!r}; it applies to .tgz/.tar.gz assets"
        )
    return level


def asset_bytes(files: Mapping[str, Content]) -> int:
    """Total size of the files' contents (before archiving)."""
    return sum(_content_size(data) for data in files.values())


def _write_error(path: pathlib.Path, error: OSError) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"could not write the NNEF asset {str(path)!r}: {error}; nothing was written there. "
        f"Check free space and permissions of {str(path.parent)!r}, or choose another path"
    )


def asset_kind(path: str | os.PathLike) -> str:
    """``"tgz"``, ``"tar"`` or ``"folder"``: the form :func:`write_asset` gives ``path``."""
    name = pathlib.Path(path).name.lower()
    if name.endswith(GZIP_SUFFIXES):
        return "tgz"
    if name.endswith(TAR_SUFFIXES):
        return "tar"
    if name.endswith(_REFUSED_SUFFIXES):
        raise InvalidArgumentError(
            f"cannot write an NNEF asset to {str(path)!r}: name it *.tgz or *.tar.gz (gzip tar), "
            f"*.tar (plain tar), or give a folder name"
        )
    return "folder"


def check_asset_path(path: str | os.PathLike) -> None:
    """Raise InvalidArgumentError now if :func:`write_asset` could not write ``path``
    (so that an export fails before its slow steps, not after)."""
    path = pathlib.Path(path)
    _check_target(path, asset_kind(path))


def _checked_entries(files: Mapping[str, Content]) -> list[tuple[str, Content]]:
    """Validate names and contents; return (name, bytes) pairs sorted by name."""
    if not isinstance(files, Mapping) or not files:
        raise InvalidArgumentError("write_asset needs a non-empty dict of file name -> bytes")
    entries = sorted(((_checked_name(name), _checked_content(name, data)) for name, data in files.items()),
                     key=lambda entry: entry[0])
    _check_no_file_dir_clash([name for name, _ in entries])
    return entries


def _checked_name(name: object) -> str:
    """A relative POSIX file name with no empty, ``.`` or ``..`` parts."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"asset file names must be non-empty strings, got {name!r}")
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise InvalidArgumentError(
            f"bad asset file name {name!r}: use a relative path with '/' separators and no "
            f"empty, '.' or '..' parts (files sit at the asset root)"
        )
    return name


def _checked_content(name: str, data: object) -> Content:
    """The content as bytes (bytes, bytearray or memoryview accepted) or a streamed file."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(getattr(data, "size", None), int) and callable(getattr(data, "chunks", None)):
        return data
    raise InvalidArgumentError(
        f"content of asset file {name!r} must be bytes or a streamed file (size and chunks()), "
        f"got {type(data).__name__}; encode text with .encode('utf-8')"
    )


def _content_size(data: Content) -> int:
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else data.size


def _content_chunks(data: Content) -> Iterator[Union[bytes, memoryview]]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield data
    else:
        yield from data.chunks()


class _ChunkReader:
    """A read-only file over a content's chunks, for ``tarfile.addfile`` (reads return views,
    not copies, when a chunk is large enough)."""

    def __init__(self, data: Content, on_bytes: Optional[Callable[[int], None]]):
        self._chunks = _content_chunks(data)
        self._current = memoryview(b"")
        self._on_bytes = on_bytes

    def read(self, size: int = -1):
        if size < 0:
            raise ValueError("a streamed asset file is read in sized pieces")
        if not self._current:
            self._current = self._next()
        if len(self._current) >= size:
            out, self._current = self._current[:size], self._current[size:]
        else:  # gather across chunks, copying only the bytes returned
            parts = bytearray(self._current)
            self._current = memoryview(b"")
            while len(parts) < size and (piece := self._next()):
                need = size - len(parts)
                parts += piece[:need]
                self._current = piece[need:]
            out = memoryview(parts)
        if self._on_bytes is not None:
            self._on_bytes(len(out))
        return out

    def _next(self) -> memoryview:
        for piece in self._chunks:
            if len(piece):
                return memoryview(piece).cast("B")
        return memoryview(b"")


def _check_no_file_dir_clash(names: list[str]) -> None:
    """Refuse a name that is both a file and the folder of another file."""
    folders = {"/".join(name.split("/")[:i]) for name in names for i in range(1, name.count("/") + 1)}
    clashes = sorted(folders.intersection(names))
    if clashes:
        raise InvalidArgumentError(
            f"asset file name(s) {clashes} are also folders of other files; rename one of them"
        )


def _check_target(path: pathlib.Path, kind: str) -> None:
    """Refuse a target whose parent is missing or not a folder, or that has the wrong kind."""
    parent = path.parent
    if not parent.exists():
        raise InvalidArgumentError(
            f"cannot write the NNEF asset {str(path)!r}: folder {str(parent)!r} does not exist; "
            f"create it first"
        )
    if not parent.is_dir():
        raise InvalidArgumentError(
            f"cannot write the NNEF asset {str(path)!r}: {str(parent)!r} is a file, not a folder; "
            f"choose a path inside a folder"
        )
    if kind == "folder" and path.exists() and not path.is_dir():
        raise InvalidArgumentError(
            f"cannot write the NNEF folder {str(path)!r}: a file of that name exists; remove it, "
            f"or end the name with .tgz or .tar to write an archive"
        )
    if kind != "folder" and path.is_dir():
        raise InvalidArgumentError(
            f"cannot write the NNEF archive {str(path)!r}: a folder of that name exists; remove "
            f"it or choose another name"
        )


def _write_tar(entries: list[tuple[str, Content]], handle, gzip_level: Optional[int],
               on_bytes: Optional[Callable[[int], None]]) -> None:
    """Write a deterministic tar (gzip-compressed at ``gzip_level`` unless None) holding
    ``entries`` at its root to the binary file ``handle``, entry by entry."""
    out = handle if gzip_level is None else _GzipWriter(handle, gzip_level)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, copybufsize=_COPY_BUFFER) as tar:
        for name, data in entries:
            tar.addfile(_tar_info(name, _content_size(data)), _ChunkReader(data, on_bytes))
    if out is not handle:
        out.close()


class _GzipWriter:
    """A write-only gzip stream with a fixed header (mtime 0, no file name).

    Level 0 writes stored deflate blocks straight from the caller's buffers: no compressed
    copy is allocated per write (with gzip.GzipFile, those short-lived buffers fragment the
    heap and grow the process's memory by about the size of the weights).
    """

    _STORED_MAX = 0xFFFF

    def __init__(self, raw, level: int):
        self._raw, self._level = raw, level
        self._crc, self._size = 0, 0
        self._deflate = None if level == 0 else zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        raw.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # deflate, no flags, mtime 0, unknown OS

    def tell(self) -> int:
        """Uncompressed bytes written so far."""
        return self._size

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._crc = _crc32(view, self._crc)
        self._size += len(view)
        if self._deflate is not None:
            self._raw.write(self._deflate.compress(view))
            return len(view)
        parts = []
        for start in range(0, len(view), self._STORED_MAX):
            block = view[start:start + self._STORED_MAX]
            parts += (_stored_header(len(block)), block)
        _write_all(self._raw, parts)
        return len(view)

    def close(self) -> None:
        if self._deflate is not None:
            self._raw.write(self._deflate.flush())
        else:
            self._raw.write(_STORED_HEADER.pack(1, 0, 0xFFFF))  # final, empty stored block
        self._raw.write(struct.pack("<II", self._crc, self._size & 0xFFFFFFFF))


_STORED_HEADER = struct.Struct("<BHH")  # BFINAL + BTYPE 00 (byte-aligned), LEN, NLEN
_STORED_HEADERS: dict = {}  # block length -> its header (all blocks but the last have the same)


def _stored_header(length: int) -> bytes:
    header = _STORED_HEADERS.get(length)
    if header is None:
        header = _STORED_HEADERS[length] = _STORED_HEADER.pack(0, length, length ^ 0xFFFF)
    return header


def _crc32_function():
    """ISA-L's CRC-32 (python-isal) when installed: the same values as zlib's, several times
    faster (at level 0 the checksum is most of the cost of writing a .tgz)."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.crc32
    return isal_zlib.crc32


_crc32 = _crc32_function()


_WRITEV_PARTS = 512  # well below the system's IOV_MAX (1024 on Linux)


def _write_all(handle, parts: list) -> None:
    """Write the buffers ``parts`` in order: with ``os.writev`` on the file's descriptor when
    there is one (one system call for many stored blocks and their headers, no copy), else one
    ``write`` each."""
    try:
        fd = handle.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None or not hasattr(os, "writev") or len(parts) < 4:
        for part in parts:
            handle.write(part)
        return
    handle.flush()
    for first in range(0, len(parts), _WRITEV_PARTS):
        pending = [memoryview(p).cast("B") for p in parts[first:first + _WRITEV_PARTS]]
        while pending:
            done = os.writev(fd, pending)
            while pending and done >= len(pending[0]):
                done -= len(pending[0])
                pending.pop(0)
            if pending and done:
                pending[0] = pending[0][done:]


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    """A regular-file tar entry with every varying field fixed."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = _FILE_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def _write_folder(entries: list[tuple[str, Content]], folder: pathlib.Path,
                  on_bytes: Optional[Callable[[int], None]]) -> None:
    """Write each entry as a file under ``folder``, streaming its chunks."""
    for name, data in entries:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            for piece in _content_chunks(data):
                handle.write(piece)
                if on_bytes is not None:
                    on_bytes(len(memoryview(piece).cast("B")))


def _move_folder_into_place(new: pathlib.Path, path: pathlib.Path) -> None:
    """Rename ``new`` to ``path``; an existing folder there is set aside, then deleted."""
    if not path.exists():
        os.rename(new, path)
        return
    holder = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
    previous = holder / "previous"
    os.rename(path, previous)
    try:
        os.rename(new, path)
    except BaseException:
        os.rename(previous, path)
        _remove_quietly(holder)
        raise
    _remove_quietly(holder)


def _remove_quietly(path: Optional[pathlib.Path]) -> None:
    """Delete a temporary file or folder, ignoring one that is already gone."""
    if path is None:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
