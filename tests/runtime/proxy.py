"""A unix-socket forwarder that can cut a server off for a moment.

A worker pointed at the proxy instead of the server loses every connection when
:meth:`Proxy.cut` is called, and is refused new ones until :meth:`Proxy.restore`: the
server, shared with the rest of the suite, stays up.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path


class Proxy:
    """Accepts on ``listen`` and forwards each connection to the socket at ``target``."""

    def __init__(self, listen: Path, target: str) -> None:
        self.listen, self.target = listen, target
        self.down = threading.Event()
        self.dropped = 0
        """Connections closed by :meth:`cut` or refused while cut."""
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(listen))
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.down.is_set():
                self.dropped += 1
                client.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Close every forwarded connection and refuse new ones."""
        self.down.set()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            self.dropped += 1
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def restore(self) -> None:
        """Forward new connections again."""
        self.down.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            self.listen.unlink()
