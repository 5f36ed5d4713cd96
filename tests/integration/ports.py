"""Free loopback ports for the tests' own servers (PostgreSQL, Prometheus, node_exporter).

Never fixed ones: make test runs its lanes side by side, and the Molecule default scenario's
node_exporter listens on the host's 127.0.0.1:19100 beside the integration tests.
"""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` loopback ports nothing listens on now, all different: each is held bound
    until all are chosen (one bound and released at a time may be handed out again)."""
    probes = [socket.socket() for _number in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def free_port() -> int:
    """A loopback port nothing listens on now."""
    return free_ports(1)[0]
