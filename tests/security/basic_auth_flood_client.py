"""The attacker of test_basic_auth_flood.py, run in a process of its own: CONNECTIONS kept-alive connections to HOST:PORT, each sending ``GET /metrics`` with a random
Basic password as fast as it is answered, reconnecting when closed, for SECONDS. Prints one JSON
line: the answers by status ("refused": the connection was closed or refused). It runs at the lowest
CPU priority: it stands for a client on another machine, not one taking the listener's CPU."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from collections import Counter


async def attacker(host: str, port: int, user: str, stop: float, counts: Counter[str]) -> None:
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            counts["refused"] += 1
            await asyncio.sleep(0.05)
            continue
        try:
            while time.monotonic() < stop:
                credentials = base64.b64encode(f"{user}:{os.urandom(8).hex()}".encode()).decode()
                writer.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {credentials}\r\n\r\n".encode())
                await writer.drain()
                status = (await reader.readline()).split(b" ")[1:2]
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                counts[status[0].decode() if status else "refused"] += 1
        except (OSError, asyncio.IncompleteReadError, IndexError, ValueError):
            counts["refused"] += 1
        finally:
            writer.close()


async def main(host: str, port: int, connections: int, seconds: float, user: str) -> None:
    counts: Counter[str] = Counter()
    stop = time.monotonic() + seconds
    try:
        async with asyncio.timeout(seconds):  # a request still waiting for its answer is given up
            await asyncio.gather(*(attacker(host, port, user, stop, counts) for _ in range(connections)))
    except TimeoutError:
        pass
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    os.nice(19)
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]))
