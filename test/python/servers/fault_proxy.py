"""A TCP proxy in front of a server that can fail on demand: pass, 503, hang or garbage."""
from __future__ import annotations

import socket
import threading


class FaultProxy:
    """A TCP proxy in front of the Rucio server: mode 'pass', '503', 'hang' or 'garbage'."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="rucio-proxy").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        mode = self.mode
        try:
            if mode == "hang":
                self._held.append(conn)
                return
            if mode in ("503", "garbage"):
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                body = b"fault 503" if mode == "503" else b"\x00\xff{not json at all\x8b"
                status = b"503 Service Unavailable" if mode == "503" else b"200 OK"
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
                conn.close()
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
            pipes = [threading.Thread(target=pipe, args=(a, b), daemon=True)
                     for a, b in ((conn, upstream), (upstream, conn))]
            for p in pipes:
                p.start()
        except OSError:
            conn.close()

    def release(self) -> None:
        for s in self._held:
            s.close()
        self._held.clear()

    def close(self) -> None:
        self._stop.set()
        self.release()
        self.server.close()


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """Relay bytes from `src` to `dst` until either side ends, then shut both down."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
