"""Writing a corpus directory as one transaction (:class:`Transaction`).

A write is a transaction. For a target ``DIR/NAME`` (symbolic links resolved):

1. ``DIR/.NAME.lock`` is locked (``flock``, exclusive, held until the write ends); a second
   writer of the same path is refused with :class:`CorpusExistsError`. Leftovers of killed
   writers are then cleaned: ``DIR/.NAME.tmp-<pid>-<8 hex>`` folders are deleted (their
   writers are dead: they would hold the lock), an interrupted two-rename overwrite is rolled
   back.
2. Shards and the manifest are written into a private folder ``DIR/.NAME.tmp-<pid>-<8 hex>``
   and fsync'd; nothing at ``DIR/NAME`` changes meanwhile, so the corpus being replaced can be
   read while its replacement is written (filtering a corpus in place works).
3. ``close()`` publishes the folder with one atomic rename that never replaces a corpus
   unless ``overwrite=True``: onto a free path (``renameat2(RENAME_NOREPLACE)``), else by
   exchanging it with what is there (``renameat2(RENAME_EXCHANGE)``: an empty folder, the
   leftovers of an older writer, or the old corpus), whose files are deleted once the folder
   holding ``NAME`` (and any folder made for it) is fsync'd. Where the file system cannot
   exchange, the old folder is renamed aside first: a crash between the two renames leaves
   nothing at ``DIR/NAME`` until the next write restores the old corpus.

So ``DIR/NAME`` holds the old complete corpus or the new one at every instant, never a mix and
(on Linux file systems that exchange: ext4, xfs, btrfs, tmpfs, ...) never nothing; a failed or
killed write changes nothing there. Readers of the old corpus detect its replacement at their
next read (:class:`~grainpack.corpus.source.FileIdentity`) instead of mixing old and new files.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import secrets
import shutil
import warnings
import weakref
from pathlib import Path
from typing import Any

from grainpack.corpus.errors import CorpusError, CorpusExistsError, OverwriteError, os_error
from grainpack.corpus.native import FORMAT_NAME, MANIFEST_NAME, SHARD_FILE, PathLike, leftovers
from grainpack.corpus.urls import refuse_url_output
from grainpack.index.checks import check_bool
from grainpack.processes import interrupts_deferred

__all__ = [
    "Transaction",
    "check_target",
    "write_lock",
    "write_synced",
]

_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``; ``False`` if the system or file system lacks it."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except AttributeError:  # not glibc >= 2.28 / not Linux
        return False
    if call(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(src), None, str(dst))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` durably before anything relies on it (a build's plan, a
    shuffled write's key file): through ``NAME.tmp`` beside it, fsync'd, renamed into place,
    and the folder fsync'd. After a crash or a power loss ``path`` holds ``data`` or what it
    held before, never a torn file. ``OSError`` propagates, the temporary file removed.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "plan.json"
        >>> write_synced(path, b"{}")
        >>> path.read_bytes(), sorted(p.name for p in path.parent.iterdir())
        (b'{}', ['plan.json'])
    """
    tmp = path.with_name(f"{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _target(path: Path) -> Path:
    """``path`` with symbolic links resolved (writers of one corpus share one lock)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        pass  # nothing there yet (a dangling link is written through)
    except OSError as err:
        raise os_error(err, "cannot write a corpus at") from err
    target = Path(os.path.realpath(path))
    if not target.name:
        raise CorpusError(f"cannot write a corpus at {path}: choose a directory below {target}")
    return target


class _Lock:
    """``flock`` on ``DIR/.NAME.lock``, the file removed on release (a reused path is
    re-checked on acquire, so a writer never holds a lock on a deleted file).

    A lock dropped unreleased (a ``KeyboardInterrupt`` right after it was taken, before its
    taker could record it) is released when it is collected, so that this process does not
    keep it and refuse its own next write."""

    def __init__(self, target: Path) -> None:
        self.path = target.parent / f".{target.name}.lock"
        # a Ctrl-C between opening the file and registering its release would leak the lock
        try:
            with interrupts_deferred():
                fd = self._acquire(target)
                self._release = weakref.finalize(self, _unlock, self.path, fd, os.getpid())
        except KeyboardInterrupt:  # held back to here: the caller never gets the lock
            if hasattr(self, "_release"):
                self._release()
            raise
        self.fd: int | None = fd

    def _acquire(self, target: Path) -> int:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:  # a read-only folder, permissions
                raise os_error(err, f"cannot write a corpus at {target}: creating") from err
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise CorpusExistsError(
                    f"another write to {target} is in progress (process {holder} holds "
                    f"{self.path}); wait for it to finish, or write elsewhere"
                ) from None
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)  # the file was removed by its previous holder: lock the new one
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as err:  # a full disk: release the lock, or this process keeps it
            self.path.unlink(missing_ok=True)
            os.close(fd)
            raise os_error(err, f"cannot write a corpus at {target}: writing", self.path) from err
        return fd

    def release(self) -> None:
        self._release()
        self.fd = None


def _unlock(path: Path, fd: int, owner: int) -> None:
    """Releases a lock: removes its file (not from a forked child: the lock is its
    parent's), then closes it."""
    try:
        if os.getpid() == owner:
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def write_lock(path: PathLike) -> _Lock:
    """The exclusive lock writers of ``path`` take (``DIR/.NAME.lock``; its parent must
    exist); ``.release()`` it when done. A build holds one on its parts folder.

    Raises:
        CorpusExistsError: another process holds it (the message names that process).
    """
    return _Lock(_target(Path(path)))


def _recover(target: Path) -> None:
    """Under the lock: undoes what killed writers left next to ``target``."""
    aside = leftovers(target, "old")
    if aside and not target.exists():  # killed between the two renames of an overwrite
        os.rename(aside.pop(), target)
    for folder in aside + leftovers(target, "tmp"):
        _remove(folder, f"a folder that an earlier write of {target} left")


def _remove(folder: Path, what: str) -> None:
    """Deletes ``folder``, a leftover no corpus needs; if it cannot be deleted (not this
    user's, ...), warns and leaves it, which blocks no write."""
    try:
        shutil.rmtree(folder)
    except OSError as err:
        warnings.warn(
            f"{what}, {folder}, could not be deleted ({err.strerror or err}: "
            f"{err.filename or folder}); delete it by hand to free its space",
            UserWarning,
            stacklevel=3,
        )


def _corpus_files(directory: Path, names: list[str]) -> set[str]:
    """Entries of ``directory`` that belong to a corpus (or to an interrupted write of one)."""
    own = {n for n in names if SHARD_FILE.fullmatch(n) or n.startswith(f".{MANIFEST_NAME}.")}
    if MANIFEST_NAME in names:
        own.add(MANIFEST_NAME)
        try:
            manifest = json.loads((directory / MANIFEST_NAME).read_bytes())
            for shard in manifest["shards"]:
                own.update(str(shard[key]) for key in ("tokens_file", "offsets_file"))
        except (OSError, ValueError, RecursionError, TypeError, KeyError):
            pass  # an unreadable manifest: its shard files are recognised by name
    return own


def check_target(path: PathLike, *, overwrite: bool) -> None:
    """Raises now what publishing a corpus at ``path`` would raise later (a file or foreign
    files in the way, a corpus without ``overwrite``, a mount point), so that a long job
    (a build) fails before its work rather than after."""
    refuse_url_output(path, "writing a corpus")
    _replaceable(_target(Path(path)), check_bool("overwrite", overwrite))


def _enclosing_corpus(target: Path) -> Path | None:
    """The grainpack corpus whose directory holds ``target`` (at any depth), if any."""
    for folder in target.parents:
        try:
            with open(folder / MANIFEST_NAME, "rb") as f:
                if json.load(f).get("format") == FORMAT_NAME:
                    return folder
        except (OSError, ValueError, AttributeError):  # none, unreadable, not ours
            continue
    return None


def _replaceable(target: Path, overwrite: bool) -> bool:
    """Whether ``target`` exists (it will be exchanged); raises if it must not be replaced
    (nor written: inside another corpus's directory, which a rewrite of that corpus would
    delete with it)."""
    if (outer := _enclosing_corpus(target)) is not None:
        raise CorpusError(
            f"{target} is inside the corpus at {outer}: rewriting or deleting that corpus "
            f"would delete this one with its directory; write it beside, e.g. at "
            f"{outer.parent / (outer.name + '-' + target.name)}"
        )
    try:
        stat = os.stat(target)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise os_error(err, "cannot write a corpus at") from err
    if not os.path.isdir(target):
        raise CorpusExistsError(f"{target} exists and is not a directory; choose another path")
    try:
        here = Path(os.path.realpath("."))
    except FileNotFoundError:  # the working directory is gone: nothing to protect
        here = None
    if here is not None and (target == here or target in here.parents):
        raise CorpusError(
            f"{target} is the current directory or holds it: a corpus replaces its whole "
            f"directory, which this process is working in; write below it (e.g. "
            f"{target / 'corpus'}) or from another directory"
        )
    try:
        names = os.listdir(target)
    except OSError as err:
        raise os_error(err, "cannot write a corpus at") from err
    if "index.json" in names:
        raise CorpusExistsError(f"{target} holds a flat-shard corpus (index.json); write elsewhere")
    if MANIFEST_NAME in names and not overwrite:
        raise OverwriteError(
            f"{target} already holds a corpus ({MANIFEST_NAME} present); "
            "pass {overwrite=} to replace it",
            overwrite=True,
        )
    own = _corpus_files(target, names)
    foreign = sorted(set(names) - own)
    if foreign:
        raise CorpusExistsError(
            f"{target} holds files that are not part of a corpus ({_some(foreign)}); a write "
            "replaces the whole directory: move them away or write to a new directory"
        )
    if own and MANIFEST_NAME not in names and not overwrite:
        raise OverwriteError(
            f"{target} holds files named as a corpus's ({_some(sorted(own))}) but no "
            f"{MANIFEST_NAME}: an incomplete corpus, or another tool's files; pass "
            "{overwrite=} to replace them, or write elsewhere",
            overwrite=True,
        )
    if stat.st_dev != os.stat(target.parent).st_dev:
        raise CorpusError(
            f"{target} is a mount point: a corpus is published by renaming a folder written "
            f"next to it, so write to a directory inside it (e.g. {target / 'corpus'})"
        )
    return True


def _some(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


class Transaction:
    """One write of the corpus at ``path``: a private staging folder next to it, under an
    exclusive lock, published by one atomic rename (see the module docstring).

    :class:`CorpusWriter` writes through one; so does anything that assembles a corpus
    from existing files (``merge_corpora``). An unpublished transaction (an exception, a
    forgotten ``publish``, a dead process) changes nothing at ``path``.

    Args:
        path: The corpus directory to write (see :class:`CorpusWriter`).
        overwrite: Replace a complete corpus at ``path``.
    """

    def __init__(self, path: PathLike, *, overwrite: bool) -> None:
        refuse_url_output(path, "writing a corpus")
        self.path, self.overwrite = Path(path), check_bool("overwrite", overwrite)
        self.target = target = _target(self.path)
        made = [p for p in target.parents if not p.exists()]  # their entries are synced too
        self._synced = [target.parent, *(p.parent for p in made)]
        self._token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.staging = target.parent / f".{target.name}.tmp-{self._token}"
        # An unpublished transaction (an exception, a Ctrl-C, a forgotten close) is aborted
        # when it is collected or the interpreter exits: registered with the lock, before
        # the staging folder exists (no Ctrl-C falls between them).
        try:
            with interrupts_deferred():
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self._lock = _Lock(target)
                except CorpusError:
                    raise
                except OSError as err:
                    raise os_error(err, "cannot write a corpus at") from err
                self._cleanup = weakref.finalize(self, _abandon, self.staging, self._lock)
            _recover(target)
            _replaceable(target, overwrite)
            self.staging.mkdir()
        except BaseException as err:
            if hasattr(self, "_cleanup"):  # (else the lock was not taken)
                self._cleanup()
            if isinstance(err, OSError) and not isinstance(err, CorpusError):
                raise os_error(err, "cannot write a corpus at") from err
            raise

    def write_file(self, name: str, data: bytes) -> None:
        """Writes ``data`` to ``name`` in the staging folder, durably.

        Raises:
            CorpusError: the write failed (a full disk, ...), naming the file.
        """
        try:
            with open(self.staging / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise self.failed(err, name) from err

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Writes ``manifest.json`` into the staging folder, durably (errors as
        :meth:`write_file`)."""
        text = json.dumps(manifest, indent=1) + "\n"
        self.write_file(MANIFEST_NAME, text.encode())
        try:
            _fsync_dir(self.staging)
        except OSError as err:
            raise self.failed(err, MANIFEST_NAME) from err

    def failed(self, err: OSError, name: str = "") -> CorpusError:
        """The :class:`CorpusError` for ``err`` met writing ``name`` in the staging folder
        (the folder itself if no name)."""
        return os_error(err, f"writing {self.path} (nothing was published) in", self.staging / name)

    def publish(self) -> None:
        """One atomic rename of the staging folder to the target; releases the lock.

        Raises:
            CorpusError: the rename failed (nothing was published), or syncing the folder
                after it failed (published, but a crash may still undo it).
        """
        try:
            replaced = self._rename()
        except BaseException as err:
            self.abort()
            if isinstance(err, OSError) and not isinstance(err, CorpusError):
                raise self.failed(err) from err
            raise
        try:
            self._cleanup.detach()  # published: what is left to do must not undo it
            self._tidy(replaced)
        except KeyboardInterrupt:  # published: the corpus it replaced still goes (a second
            with contextlib.suppress(Exception):  # Ctrl-C stops that: the next write does it)
                self._tidy(replaced)
            raise
        finally:
            self._lock.release()

    def _tidy(self, replaced: Path | None) -> None:
        """After the rename: syncs the folders, then deletes the replaced folder, if any
        (again after an interrupt: what is done already is skipped)."""
        for folder in self._synced:  # the new corpus's entry, then its new folders'
            try:
                _fsync_dir(folder)
            except OSError as err:  # the old corpus stays beside it: the next write
                raise os_error(  # removes it
                    err,
                    f"{self.path} was published, but a crash may still undo it: syncing",
                    folder,
                ) from err
        if replaced is None:
            return
        if replaced != self.staging and replaced.exists():  # set aside by two renames:
            with contextlib.suppress(OSError):  # named as staging, no later write takes
                os.rename(replaced, self.staging)  # it for an overwrite to roll back
        # The replaced folder: readers that mapped its files keep them until they unmap.
        for folder in dict.fromkeys((self.staging, replaced)):
            if folder.exists():
                _remove(folder, f"{self.path} was published, but the corpus it replaced")

    def _rename(self) -> Path | None:
        """Publishes the staging folder; returns where the replaced folder now is, if any."""
        target, staging = self.target, self.staging
        if not _replaceable(target, self.overwrite):
            if not _renameat2(staging, target, _RENAME_NOREPLACE):
                os.rename(staging, target)  # under the lock: no grainpack writer races it
            return None
        if _renameat2(staging, target, _RENAME_EXCHANGE):
            return staging
        aside = target.parent / f".{target.name}.old-{self._token}"
        os.rename(target, aside)
        try:
            os.rename(staging, target)  # a crash before this line: the next write restores
        except BaseException:
            os.rename(aside, target)  # nothing was published: the old corpus goes back now
            raise
        return aside

    def abort(self) -> None:
        """Removes the staging folder and releases the lock; nothing at ``path`` changes."""
        self._cleanup()


def _abandon(staging: Path, lock: _Lock) -> None:
    """Removes an unpublished staging folder and releases the lock."""
    shutil.rmtree(staging, ignore_errors=True)
    lock.release()
