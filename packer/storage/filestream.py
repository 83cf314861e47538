"""A data file written sequentially by a writer: vectored writes, sha256 and writeback in threads.

Why: with small images the main thread has little time per image, and copying each
image into a userspace buffer (BufferedWriter) and hashing it would take a large share
of it. Here pieces (headers, image bytes, padding) go to the kernel with one `writev`
per batch (no userspace copy), a background thread hashes the same pieces (hashlib
releases the GIL, so it runs on another core), and another thread asks the kernel to
write back every WRITEBACK_BYTES, so the fsync that ends the file waits for the last
stretch only instead of the whole file.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packer.storage.files import sha256_file

FLUSH_BYTES = 1 << 20
MAX_PIECES = 1000  # below IOV_MAX (1024 on Linux)
WRITEBACK_BYTES = 32 << 20


def write_all(fd: int, pieces: list[bytes]) -> int:
    """Write every piece in order with as few system calls as possible; returns bytes written."""
    total = 0
    for start in range(0, len(pieces), MAX_PIECES):
        chunk = pieces[start : start + MAX_PIECES]
        want = sum(len(piece) for piece in chunk)
        done = os.writev(fd, chunk)
        if done < want:  # a short write (e.g. a signal): finish with plain writes
            rest = memoryview(b"".join(chunk))[done:]
            while rest:
                rest = rest[os.write(fd, rest) :]
        total += want
    return total


class Hasher(threading.Thread):
    """sha256 of everything fed to it, in order, off the main thread.

    The queue is bounded, so a writer that outruns the hash waits instead of piling
    up memory.
    """

    def __init__(self, max_queued: int = 8) -> None:
        super().__init__(name="packer-sha256", daemon=True)
        self.digest = hashlib.sha256()
        self.queue: queue.Queue[list[bytes] | None] = queue.Queue(max_queued)
        self.start()

    def feed(self, pieces: list[bytes]) -> None:
        self.queue.put(pieces)

    def run(self) -> None:
        while (pieces := self.queue.get()) is not None:
            for piece in pieces:
                self.digest.update(piece)

    def hexdigest(self) -> str:
        """Wait for everything fed so far, then the digest (the thread ends)."""
        self.queue.put(None)
        self.join()
        return self.digest.hexdigest()

    def stop(self) -> None:
        """End the thread without hashing what is still queued (a failed run).

        Never blocks: a Ctrl-C landing inside queue.Queue's own code can leave its lock
        held, and waiting for it would hang abort() forever; then the thread, a daemon,
        is left to end with the process.
        """
        if not self.queue.mutex.acquire(timeout=1.0):
            return
        self.queue.mutex.release()
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        self.queue.put(None)  # room is certain: we are the only producer


class Writeback(threading.Thread):
    """Starts writing dirty pages to disk while the main thread keeps producing."""

    def __init__(self, fd: int) -> None:
        super().__init__(name="packer-writeback", daemon=True)
        self.fd = fd
        self.wanted = threading.Event()
        self.stopping = False
        self.start()

    def run(self) -> None:
        while True:
            self.wanted.wait()
            self.wanted.clear()
            if self.stopping:
                return
            try:
                os.fdatasync(self.fd)
            except OSError:
                return  # the final fsync reports real problems

    def stop(self, timeout: float | None = None) -> None:
        self.stopping = True
        self.wanted.set()
        self.join(timeout)


class ShardFile:
    """Append-only file: `write` pieces, `close` (fsync), then `hexdigest` of the pieces.

    `start` leaves a hole of that many bytes before the first piece; hdf5 uses it to
    put its blob where the HDF5 metadata will end. `hashed=False` skips the sha256
    (a writer that must hash the finished file anyway).
    """

    def __init__(self, path: Path, start: int = 0, hashed: bool = True) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.lseek(self.fd, start, os.SEEK_SET)
        self.size = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._unsynced = 0
        self._hasher = Hasher() if hashed else None
        self._writeback = Writeback(self.fd)

    def write(self, pieces: list[bytes]) -> None:
        """Queue pieces; they reach the file in order by the next flush."""
        size = sum(len(piece) for piece in pieces)
        self._pending += pieces
        self._pending_bytes += size
        self.size += size
        if self._pending_bytes >= FLUSH_BYTES or len(self._pending) >= MAX_PIECES:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pieces, self._pending = self._pending, []
        self._unsynced += write_all(self.fd, pieces)
        self._pending_bytes = 0
        if self._hasher is not None:
            self._hasher.feed(pieces)
        if self._unsynced >= WRITEBACK_BYTES:
            self._unsynced = 0
            self._writeback.wanted.set()

    def close(self) -> None:
        """Flush, fsync and close."""
        self.flush()
        self._writeback.stop()
        os.fsync(self.fd)
        fd, self.fd = self.fd, -1  # closed once: abort() after close() must not close again
        os.close(fd)

    def hexdigest(self) -> str:
        """sha256 of every piece written (after `close`)."""
        if self._hasher is None:
            raise ValueError("this ShardFile was opened with hashed=False")
        return self._hasher.hexdigest()

    def abort(self) -> None:
        """Release the file without making it durable (a failed or interrupted run)."""
        if self._hasher is not None:
            self._hasher.stop()
        self._writeback.stop(timeout=2.0)
        if self.fd >= 0:  # not yet closed (an interrupt can land right after close())
            fd, self.fd = self.fd, -1
            os.close(fd)


def hash_while(path: Path, action: Callable[[], None]) -> str:
    """sha256 of the finished file at `path`, computed while `action` (an fsync) runs.

    Both release the GIL: hashing keeps a core busy while the fsync waits for the disk.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="packer-sha256") as pool:
        digest = pool.submit(sha256_file, path)
        action()
        return digest.result()


class StreamHash:
    """Hash the records of a file as they are written (on another core), and start
    writeback as data accumulates.

    npy hashes its rows so, apart from its header (written last, when the count is
    known): the file's checksum is the header's and the rows', kept as pieces.
    A resumed run (hashing=False) wrote some rows before: `finish` returns None and the
    caller hashes the rows from the file.
    """

    def __init__(self, fd: int, hashing: bool) -> None:
        self._hasher = Hasher() if hashing else None
        self._writeback = Writeback(fd)
        self._unsynced = 0

    def wrote(self, data: bytes) -> None:
        if self._hasher is not None:
            self._hasher.feed([data])
        self._unsynced += len(data)
        if self._unsynced >= WRITEBACK_BYTES:
            self._unsynced = 0
            self._writeback.wanted.set()

    def finish(self) -> str | None:
        """The sha256 of every record written, or None for a resumed run."""
        self._writeback.stop()
        return None if self._hasher is None else self._hasher.hexdigest()

    def stop(self) -> None:
        if self._hasher is not None:
            self._hasher.stop()
        self._writeback.stop(timeout=2.0)
