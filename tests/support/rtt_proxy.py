"""A delaying TCP proxy on 127.0.0.1 that counts round trips (the kernel's netem is not
available on these machines).

``DelayProxy(target, rtt)`` listens on a free port of 127.0.0.1 and forwards each
connection to ``target`` (a Unix socket path, or a ``(host, port)`` pair), holding every
chunk for half the round-trip time in each direction, in order. The TCP handshake a real
link would cost is simulated by holding the client's first bytes one more round trip.

Round trips are counted per connection, at the proxy: a *flight* is the client's bytes sent
after the server last spoke (or first); it counts as a round trip when the server answers
it. A connection costs ``1 + flights answered`` (the handshake, then each exchange), so the
count of a command is deterministic for a given protocol conversation, whatever the timing.
Bytes the server sends unasked (a notification) are not a round trip; the client's closing
message, unanswered, is not either.

Runs its own asyncio loop in a daemon thread; ``stop()`` closes the listener and every
forwarded connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time


class Link:
    """One forwarded connection's counts."""

    __slots__ = ("answered", "client_bytes", "flights", "opened", "server_bytes", "waiting")

    def __init__(self) -> None:
        self.flights = 0
        self.answered = 0
        self.waiting = False  # a client flight not answered yet
        self.opened = time.monotonic()
        self.client_bytes = 0
        self.server_bytes = 0

    @property
    def round_trips(self) -> int:
        return 1 + self.answered


class DelayProxy:
    def __init__(self, target, rtt: float) -> None:
        self.target = target
        self.rtt = rtt
        self.links: list[Link] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server = None
        self._tasks: set = set()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)
        self.port = self._server.sockets[0].getsockname()[1]

    # -- what tests and benches read --

    def reset(self) -> None:
        with self._lock:
            self.links = []

    def snapshot(self) -> list[Link]:
        with self._lock:
            return list(self.links)

    def round_trips(self) -> int:
        return sum(link.round_trips for link in self.snapshot())

    def stop(self) -> None:
        async def close():
            self._server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:  # let each connection's pumps see the cancellation and end
                await asyncio.wait(tasks, timeout=5)
            await asyncio.sleep(0.01)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- the loop --

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        ready.set()
        self._loop.run_forever()

    async def _accept(self, client_reader, client_writer) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # stop(): the connection ends with the proxy
            await self._forward(client_reader, client_writer)

    async def _forward(self, client_reader, client_writer) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        link = Link()
        with self._lock:
            self.links.append(link)
        try:
            if isinstance(self.target, str):
                server_reader, server_writer = await asyncio.open_unix_connection(self.target)
            else:
                server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        sock = client_writer.get_extra_info("socket")
        if sock is not None and sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        half = self.rtt / 2
        upstream = asyncio.ensure_future(self._pump(client_reader, server_writer, link, True, half, self.rtt))
        downstream = asyncio.ensure_future(self._pump(server_reader, client_writer, link, False, half, 0.0))
        try:
            await asyncio.wait([upstream, downstream], return_when=asyncio.FIRST_COMPLETED)
            # One side closed: let what is in flight arrive, then close both.
            await asyncio.wait([upstream, downstream], timeout=self.rtt + 1)
        finally:
            for pump in (upstream, downstream):
                pump.cancel()
            for writer in (client_writer, server_writer):
                with contextlib.suppress(Exception):
                    writer.close()
            self._tasks.discard(task)

    async def _pump(self, reader, writer, link: Link, from_client: bool, delay: float, first_extra: float) -> None:
        """Forward ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read
        (``first_extra`` more for the first: the handshake), in order."""
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver():
            while True:
                due, chunk = await queue.get()
                if chunk is None:
                    with contextlib.suppress(Exception):
                        writer.write_eof()
                    return
                pause = due - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        first = True
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    queue.put_nowait((0.0, None))
                    break
                with self._lock:
                    if from_client:
                        link.client_bytes += len(chunk)
                        if not link.waiting:
                            link.flights += 1
                            link.waiting = True
                    else:
                        link.server_bytes += len(chunk)
                        if link.waiting:
                            link.answered += 1
                            link.waiting = False
                queue.put_nowait((time.monotonic() + delay + (first_extra if first else 0.0), chunk))
                first = False
            await sender
        finally:
            sender.cancel()
