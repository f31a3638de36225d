#!/usr/bin/env python3
"""A TCP port for a rendezvous that no socket holds now and that no connection will take.

bind(("127.0.0.1", 0)) hands out a port from the kernel's ephemeral range (32768-60999 here):
the same range every outgoing connection of the tests running beside us draws from, so between
closing our probe and PyTorch's TCP store binding it, another test's connection can take it
("Address already in use"). Ports below that range are only ever taken by an explicit bind.

    free_port.py            prints one"""
import random
import socket


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except OSError:
        return 32768, 60999


def free_port():
    low, _ = ephemeral_range()
    candidates = list(range(20000, max(20001, low)))
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit("free_port: no free port below the ephemeral range")


if __name__ == "__main__":
    print(free_port())
