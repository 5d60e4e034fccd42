"""Makes a new container's address known on its network, then runs the container's command.

A replaced container keeps its fixed address but gets a new MAC address. A peer that talked to
the old container keeps the old MAC in its neighbour cache, and what it sends there is lost
until the entry is re-resolved (measured here: a connect from the proxy stand-in took 11 s).
Docker hosts avoid that (a MAC derived from the IPv4 address up to Docker 27, an unsolicited ARP
since 28); podman 4.3 with CNI does neither. One datagram to the gateway makes this kernel
broadcast an ARP request that carries the new MAC, and every peer holding an entry for this
address takes it.

    python3 announce.py -- COMMAND [ARG...]
"""

from __future__ import annotations

import os
import socket
import struct
import sys

RTF_GATEWAY = 0x2
DISCARD_PORT = 9


def default_gateway(route_table: str) -> str | None:
    """The IPv4 default gateway from the text of /proc/net/route, or None."""
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1] == "00000000" and int(fields[3], 16) & RTF_GATEWAY:
            return socket.inet_ntoa(struct.pack("<I", int(fields[2], 16)))
    return None


def main(argv: list[str]) -> None:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.exit("usage: announce.py -- COMMAND [ARG...]")
    command = argv[argv.index("--") + 1:]
    with open("/proc/net/route") as handle:
        gateway = default_gateway(handle.read())
    if gateway is None:
        print("announce: no IPv4 default gateway; nothing announced", file=sys.stderr, flush=True)
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"", (gateway, DISCARD_PORT))
        print(f"announce: ARP for gateway {gateway} sent", file=sys.stderr, flush=True)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
