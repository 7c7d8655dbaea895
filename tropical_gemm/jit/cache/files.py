"""File access the cache can trust: owner and mode checks, capped reads, atomic writes, locks.

Everything the cache reads could have been put there by someone else, or
replaced by a FIFO, a device or a symlink; everything it writes may be cut
short by a kill.  So:

* paths are opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO cannot
  block the open), then ``fstat``-checked: a regular file (or directory),
  owned by this user, root or the shared group, writable by no one else;
* reads stop at a cap, whatever the file claims, so ``/dev/zero`` or a huge
  file costs at most the cap;
* files and directories get exact modes (0600/0700, or 0660/2770 with a
  shared group) by ``fchmod``/``chmod``, so the umask cannot widen them;
* writes go to a temp file named by pid and host, then ``fsync`` and
  ``os.replace``, so a reader sees all of a file or none of it, and a dead
  writer's temp file is known to be debris;
* a bad path is renamed aside (atomic, inside a directory we trust) and then
  removed, so it heals once instead of failing in every process.
"""

from __future__ import annotations

from typing import NamedTuple

import errno
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path


class UntrustedFile(Exception):
    """A cache path that must not be used as it is: ``problem`` says why."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple:
        return type(self), (self.path, self.problem)


class LockTimeout(Exception):
    """Another process held an entry's lock for the whole timeout."""


class LocksUnsupported(Exception):
    """The file system under a lock file has no ``flock`` (NFS without a lock daemon, some FUSE or Lustre mounts)."""


#: What ``flock`` raises where the file system offers no locks, as opposed to a lock that is taken.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


# os.uname().nodename is what socket.gethostname() returns on POSIX, without importing socket.
_HOST = hashlib.sha256(os.uname().nodename.encode()).hexdigest()[:8]
_OPEN_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_OPEN_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0))


class Trust(NamedTuple):
    """Whose files the cache accepts: this user's and root's, and a shared group's (``group``) if set."""

    uid: int
    group: int | None = None

    @classmethod
    def current(cls, group: int | None = None) -> "Trust":
        return cls(os.geteuid(), group)

    @property
    def file_mode(self) -> int:
        return 0o660 if self.group is not None else 0o600

    @property
    def dir_mode(self) -> int:
        # setgid: entries created by any member inherit the shared group.
        return 0o2770 if self.group is not None else 0o700

    def problem(self, st: os.stat_result, *, directory: bool) -> str | None:
        """Why a path with this ``lstat``/``fstat`` result is not ours to use, or ``None``."""
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link"
        if directory and not stat.S_ISDIR(st.st_mode):
            return "is not a directory"
        if not directory and not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        shared = self.group is not None and st.st_gid == self.group
        # root's files are trusted like ours (root could replace ours anyway):
        # a read-only image populated as root serves every user.
        if st.st_uid not in (self.uid, 0) and not shared:
            return f"is owned by uid {st.st_uid}, not by you (uid {self.uid})"
        if st.st_mode & stat.S_IWOTH:
            return "is writable by every user"
        if st.st_mode & stat.S_IWGRP and not shared:
            return f"is writable by group {st.st_gid}, which is not the cache's shared group"
        return None


def read_capped(path: Path, cap: int, trust: Trust) -> bytes:
    """The bytes of ``path`` if it is a trusted regular file of at most ``cap`` bytes.

    Raises ``FileNotFoundError`` when absent and :class:`UntrustedFile`
    when it is anything else; never blocks on a FIFO, never reads past the cap.
    """
    try:
        fd = os.open(path, _OPEN_READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFile(path, "is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        problem = trust.problem(st, directory=False)
        if problem is None and st.st_size > cap:
            problem = f"holds {st.st_size} bytes, more than the {cap} expected"
        if problem is not None:
            raise UntrustedFile(path, problem)
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise UntrustedFile(path, f"grew past the {cap} bytes expected while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _scratch_name(final_name: str, suffix: str) -> str:
    """``.<name>.<pid>@<host>.<random><suffix>``: whose it is, so a sweep knows when it is debris.

    The random part is eight hex digits from ``os.urandom`` (what ``secrets.token_hex(4)`` gives, without
    importing ``secrets`` and ``hmac`` on the warm path).
    """
    return f".{final_name}.{os.getpid()}@{_HOST}.{os.urandom(4).hex()}{suffix}"


def temp_name(final_name: str) -> str:
    return _scratch_name(final_name, ".tmp")


def aside_name(final_name: str) -> str:
    return _scratch_name(final_name, ".bad")


def is_scratch(name: str) -> bool:
    """A temp file or a moved-aside path (``.….tmp`` or ``.….bad``)."""
    return name.startswith(".") and (name.endswith(".tmp") or name.endswith(".bad"))


def owner_is_gone(name: str) -> bool:
    """Whether a scratch name's writer was a process on this host that no longer runs."""
    parts = name.rsplit(".", 3)
    if len(parts) != 4 or "@" not in parts[1]:
        return False
    pid, _, host = parts[1].partition("@")
    if host != _HOST or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, someone else's
        return False
    return False


def atomic_write(path: Path, data: bytes, trust: Trust) -> None:
    """Temp file in the same directory, exact mode, fsync, ``os.replace``: readers see all or nothing."""
    temp = path.with_name(temp_name(path.name))
    fd = os.open(temp, _OPEN_CREATE, 0o600)
    try:
        try:
            if trust.group is not None:
                os.fchown(fd, -1, trust.group)
            os.fchmod(fd, trust.file_mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        unlink_quietly(temp)
        raise


def make_dir(path: Path, trust: Trust) -> None:
    """Create ``path`` with the cache's exact mode (and group); an existing one is left to :func:`ensure_dir`."""
    os.mkdir(path, 0o700)
    if trust.group is not None:
        os.chown(path, -1, trust.group)
    os.chmod(path, trust.dir_mode)


def ensure_dir(path: Path, trust: Trust) -> str | None:
    """Make ``path`` a trusted directory inside a trusted parent; returns what was moved aside, if anything."""
    for _ in range(3):  # another process may create or heal it at the same moment
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            try:
                make_dir(path, trust)
                return None
            except FileExistsError:
                continue
        problem = trust.problem(st, directory=True)
        if problem is None:
            return None
        remove_aside(path)
        return problem
    return None


def untrusted_dir(root: Path, directory: Path, trust: Trust) -> tuple[Path, str] | None:
    """The first directory from ``root`` down to ``directory`` that must not be read from, and why.

    ``root`` may be a symlink the user chose, so what it names is checked;
    every directory below it must itself be a directory of ours.  A missing
    one ends the walk (there is nothing below it to read).  Checked on every
    read, not only when creating: a directory swapped since is caught.
    """
    path = root
    for depth, part in enumerate(("", *directory.relative_to(root).parts)):
        path = path / part if part else path
        try:
            st = os.stat(path) if depth == 0 else os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return path, f"cannot be examined ({exc.strerror})"
        problem = trust.problem(st, directory=True)
        if problem is not None:
            return path, problem
    return None


def ensure_dir_chain(root: Path, directory: Path, trust: Trust) -> list[tuple[Path, str]]:
    """:func:`ensure_dir` for every directory below ``root`` down to ``directory``: what was moved aside, and why."""
    healed = []
    path = root
    for part in directory.relative_to(root).parts:
        path = path / part
        problem = ensure_dir(path, trust)
        if problem is not None:
            healed.append((path, problem))
            ensure_dir(path, trust)  # moved aside: made anew, so the levels below it can be
    return healed


def remove_aside(path: Path) -> None:
    """Rename ``path`` out of the way (atomic), then delete it; a failed delete is left for the sweep."""
    aside = path.with_name(aside_name(path.name))
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    remove_tree_or_file(aside)


def remove_tree_or_file(path: Path) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def touch(path: Path) -> None:
    """Record a use for LRU pruning; a read-only cache simply keeps its old times."""
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:
        pass


class EntryLock:
    """An exclusive ``flock`` on a lock file opened with ``O_NOFOLLOW``, waited for up to a timeout.

    A symlink, FIFO, directory or foreign file at the lock's path is an
    :class:`UntrustedFile` (the caller moves it aside); a holder that dies
    releases the lock with its file descriptors.
    """

    def __init__(self, path: Path, timeout: float, trust: Trust) -> None:
        self.path, self.timeout, self.trust = path, timeout, trust
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, which only costs duplicate compiles
            return

        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise UntrustedFile(self.path, "is not a regular file") from None
            raise
        try:
            st = os.fstat(fd)
            problem = self.trust.problem(st, directory=False)
            if problem is not None:
                raise UntrustedFile(self.path, problem)
            if stat.S_IMODE(st.st_mode) != self.trust.file_mode and st.st_uid == self.trust.uid:
                os.fchmod(fd, self.trust.file_mode)
            self._wait(fcntl, fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _wait(self, fcntl: object, fd: int) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[attr-defined]
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(str(self.path)) from None
                time.sleep(0.02)
            except OSError as exc:
                if exc.errno in _NO_LOCKS:
                    raise LocksUnsupported(exc.strerror) from None
                raise

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
