"""Write an NNEF asset (``graph.nnef``, ``.dat`` files, fragments) as a folder, .tar or .tgz.

The output form follows the name: ``*.tgz`` / ``*.tar.gz`` give a gzip tar, ``*.tar`` a plain
tar, anything else a folder. Files sit at the archive root: tract 0.23.9 does not find
``graph.nnef`` under a top-level folder inside the archive. A name may hold ``/`` (a
variable labelled ``encoder/w`` lives in ``encoder/w.dat``).

Archives are byte-identical for identical input: entries sorted by name, mtime 0,
uid/gid 0, no user or group names, mode 0644, gzip header with mtime 0 and no file name.

Writes are atomic: everything goes to a hidden temporary sibling of ``out_path`` that is
renamed into place once complete, so an error leaves neither a partial asset nor a
temporary file. An existing folder is replaced only after the new one is complete.
"""
from __future__ import annotations

import gzip
import io
import os
import pathlib
import shutil
import tarfile
import tempfile
from collections.abc import Mapping

from fx2nnef.errors import InvalidArgumentError

GZIP_SUFFIXES = (".tgz", ".tar.gz")
TAR_SUFFIXES = (".tar",)
# Compressed forms tract does not read: refused rather than written as a folder by that name.
_REFUSED_SUFFIXES = (".zip", ".gz", ".bz2", ".xz", ".zst", ".tbz", ".tbz2", ".txz")
_FILE_MODE = 0o644
_GZIP_LEVEL = 6


def write_asset(files: Mapping[str, bytes], out_path: str | os.PathLike) -> pathlib.Path:
    """Write ``files`` (relative name -> content) to ``out_path`` and return that path.

    Raises InvalidArgumentError, before writing anything, for bad names or contents, a
    parent folder that does not exist or is a file, or a target of the other kind (a file
    where a folder goes, or the reverse).
    """
    path = pathlib.Path(out_path)
    entries = _checked_entries(files)
    kind = asset_kind(path)
    _check_target(path, kind)
    try:
        if kind == "folder":
            _write_folder_atomically(entries, path)
        else:
            _write_file_atomically(_tar_bytes(entries, gzipped=kind == "tgz"), path)
    except OSError as error:
        raise InvalidArgumentError(
            f"could not write the NNEF asset {str(path)!r}: {error}; nothing was written there. "
            f"Check free space and permissions of {str(path.parent)!r}, or choose another path"
        ) from error
    return path


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


def _checked_entries(files: Mapping[str, bytes]) -> list[tuple[str, bytes]]:
    """Validate names and contents; return (name, bytes) pairs sorted by name."""
    if not isinstance(files, Mapping) or not files:
        raise InvalidArgumentError("write_asset needs a non-empty dict of file name -> bytes")
    entries = sorted((_checked_name(name), _checked_content(name, data)) for name, data in files.items())
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


def _checked_content(name: str, data: object) -> bytes:
    """The content as bytes (bytes, bytearray or memoryview accepted)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(
            f"content of asset file {name!r} must be bytes, got {type(data).__name__}; "
            f"encode text with .encode('utf-8')"
        )
    return bytes(data)


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


def _tar_bytes(entries: list[tuple[str, bytes]], *, gzipped: bool) -> bytes:
    """A deterministic tar (gzip-compressed if asked) holding ``entries`` at its root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in entries:
            tar.addfile(_tar_info(name, len(data)), io.BytesIO(data))
    raw = buffer.getvalue()
    if not gzipped:
        return raw
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=_GZIP_LEVEL) as gz:
        gz.write(raw)
    return compressed.getvalue()


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


def _write_file_atomically(data: bytes, path: pathlib.Path) -> None:
    """Write ``data`` to a temporary sibling, then rename it onto ``path``."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp_name, _FILE_MODE)
        os.replace(temp_name, path)
    except BaseException:
        _remove_quietly(pathlib.Path(temp_name))
        raise


def _write_folder_atomically(entries: list[tuple[str, bytes]], path: pathlib.Path) -> None:
    """Fill a temporary sibling folder, then move it to ``path`` (replacing an old one)."""
    temp_dir = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        for name, data in entries:
            target = temp_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        os.chmod(temp_dir, 0o755)
        _move_folder_into_place(temp_dir, path)
    except BaseException:
        _remove_quietly(temp_dir)
        raise


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


def _remove_quietly(path: pathlib.Path) -> None:
    """Delete a temporary file or folder, ignoring one that is already gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
