"""A round-robin TCP forwarder that stands in for a Service in front of two replicas: each new
connection goes to the next backend, bytes are passed both ways untouched (TLS ends at the
replica). A backend that refuses the connection is skipped for that connection, as a Service
drops an endpoint whose pod is gone (here at once; a real one after its readiness probe fails).

`connections[i]` counts the connections given to backend i, `refused[i]` those it refused;
`exchanges[i]` holds, for each time a client sent data and then backend i answered, the seconds in
between (for a client that sends one request at a time, as kube-scheduler calls its extender: each
call's time at that replica, TLS included); `stall(i)` stops passing data from backend i to its
clients (a stalled path, the connections kept open) until `resume(i)`."""

from __future__ import annotations

import socket
import threading
import time


class Forwarder:
    def __init__(self, backends: list[tuple[str, int]], host: str = "127.0.0.1", port: int = 0) -> None:
        self.backends = list(backends)
        self.connections = [0] * len(self.backends)
        self.refused = [0] * len(self.backends)
        self.exchanges: list[list[float]] = [[] for _ in self.backends]
        self._stalled = [threading.Event() for _ in self.backends]
        self._lock = threading.Lock()
        self._next = 0
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server((host, port), reuse_port=False)
        self.port = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"forwarder:{self.port}", daemon=True)

    def start(self) -> "Forwarder":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            socks = list(self._open)
        for s in socks:
            _shut(s)
        self._thread.join(timeout=5)

    def stall(self, i: int) -> None:
        self._stalled[i].set()

    def resume(self, i: int) -> None:
        self._stalled[i].clear()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        with self._lock:
            start, self._next = self._next, (self._next + 1) % len(self.backends)
        for k in range(len(self.backends)):
            i = (start + k) % len(self.backends)
            try:
                backend = socket.create_connection(self.backends[i], timeout=2)
            except OSError:
                with self._lock:
                    self.refused[i] += 1
                continue
            backend.settimeout(None)
            with self._lock:
                self.connections[i] += 1
                self._open |= {client, backend}
            asked = [None]   # when the client last sent data the backend has not answered yet
            threading.Thread(target=self._pump, args=(backend, client, self._stalled[i], asked, self.exchanges[i]),
                             daemon=True).start()
            self._pump(client, backend, None, asked, None)
            return
        _shut(client)

    def _pump(self, src: socket.socket, dst: socket.socket, stalled: threading.Event | None, asked: list,
              answers: list | None) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if answers is None:
                    if asked[0] is None:
                        asked[0] = time.monotonic()
                elif asked[0] is not None:
                    answers.append(time.monotonic() - asked[0])
                    asked[0] = None
                while stalled is not None and stalled.is_set() and not self._stopping.is_set():
                    self._stopping.wait(0.05)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _shut(s)
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
