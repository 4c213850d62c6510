"""The one way the harness writes files: results, reports, docs and timelines.

A file appears complete or not at all: its bytes go to a temporary file in the same folder, are
fsynced, and are then renamed (or, for a name that must never be replaced, hard-linked) into place.
A folder of files that does not exist yet is written as a temporary sibling and renamed into place
whole, so an interrupted report or timeline leaves no half-written folder. Files are 0644, folders
0755, whatever the umask or mkstemp's 0600.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path


class OutputError(ValueError):
    """An output folder that cannot be written; str(self) is the one-line reason."""


class NowhereToWrite(OSError):
    """No place could take a result, not even compressed (harness/results/results.py write_or_rescue);
    str(self) is the one-line reason, which names every place tried."""


def check_writable(folder: Path) -> None:
    """Bad output folder: OutputError with one line, before any work and without creating anything.
    Each part of the path is looked at with stat, not Path.exists (which reads a symlink loop or a
    dangling link as "not there yet", so the run went ahead and failed only when it wrote)."""
    folder = Path(folder)
    probe = folder
    while True:
        try:
            st = os.stat(probe)
            break
        except (FileNotFoundError, NotADirectoryError):  # a file among the parents: said below
            if os.path.islink(probe):
                raise OutputError(f"cannot write to {folder}: {probe} is a symlink to nothing "
                                  f"({os.readlink(probe)})") from None
            probe = probe.parent
        except OSError as e:  # ELOOP, EACCES, ENAMETOOLONG
            raise OutputError(f"cannot write to {folder}: {probe}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{folder}: exists and is not a folder" if probe == folder
                          else f"cannot write to {folder}: {probe} is not a folder")
    try:  # os.access is not enough: root passes it on a read-only file system
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OutputError(f"cannot write to {folder}: {e.strerror or e}") from None


def own_folder(folder: Path, home: Path) -> Path:
    """folder, a folder of home's own (as `compare` claims one with os.mkdir): its links resolved, it must
    lie inside home's, and folder itself may not be a link (a link beside a result, R/ for R.json, once
    made `report R.json` write its files wherever it led, replacing files there). The resolved folder;
    OutputError with one line otherwise, before anything is written."""
    folder, home = Path(folder), Path(home)
    try:
        real, base = folder.resolve(), home.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise OutputError(f"cannot write to {folder}: {getattr(e, 'strerror', None) or e}") from None
    if os.path.islink(folder):
        raise OutputError(f"{folder}: is a symbolic link (to {os.readlink(folder)}), not the result's own folder: "
                          "remove it, or name a folder with --out")
    if real != base and not real.is_relative_to(base):
        raise OutputError(f"{folder}: leads outside the result's own folder ({base}), to {real}: name a folder "
                          "with --out")
    return real


def _put(folder: Path, name: str, data: bytes, exclusive: bool) -> Path:
    """One file, atomically; exclusive: never replace an existing name (FileExistsError)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        if exclusive:
            os.link(tmp, folder / name)
        else:
            os.replace(tmp, folder / name)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return folder / name


def write_files(folder: Path, files: dict[str, bytes], exclusive: bool = False, last: str | None = None) -> list[Path]:
    """Write {name: bytes} into folder: a new folder appears whole (renamed from a temporary sibling);
    into an existing one each file is replaced atomically, `last` after the others (a reader who opens
    it sees the old version or the complete new one). exclusive: FileExistsError rather than replace."""
    folder = Path(folder)
    order = sorted(files, key=lambda n: n == last)
    if folder.is_dir():
        return [_put(folder, n, files[n], exclusive) for n in order]
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.tmp-"))
    try:
        for n in order:
            _put(tmp, n, files[n], False)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)
        except OSError as e:  # it appeared meanwhile: write into it instead
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            return [_put(folder, n, files[n], exclusive) for n in order]
        return [folder / n for n in order]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rescue_folders() -> list[Path]:
    """Where a result goes when its own folder cannot take it (full disk, read-only): the system's
    temporary folder, then the home folder, then the current folder (each where there is one): places on
    other file systems, most often, than the one that failed."""
    places = [Path(tempfile.gettempdir()) / "triptych-rescue"]
    try:
        places.append(Path.home() / "triptych-rescue")
    except (RuntimeError, KeyError, OSError):  # no $HOME and no entry in the password database
        pass
    try:
        places.append(Path.cwd())
    except OSError:  # the current folder was removed
        pass
    return places


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of path, a regular file of at most `limit` bytes, or OSError / ValueError with one line:
    a FIFO, a device (/dev/zero), a folder or a file too large is refused before anything is read.
    Opened without blocking (a FIFO with no writer would hang an open) and checked on the open file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes, more than the {limit} a file here may have")
        chunks, left = [], limit + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > limit:
            raise ValueError(f"more than the {limit} bytes a file here may have")
        return data
    finally:
        os.close(fd)
