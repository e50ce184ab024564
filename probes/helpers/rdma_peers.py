"""Which ports of one host are peers (net.rdma): the rails that should match each other.

A port's rate peers are the other ACTIVE ports with the same link layer, HCA type and board
id; its MTU peers the other ACTIVE RoCE ports whose netdev MTU is known. Each function takes
net.rdma's rows (one dict of fields a port) and reads nothing.
"""

from __future__ import annotations

from typing import Any


def peers(rows: list[dict[str, Any]], row: dict[str, Any]) -> list[dict[str, Any]]:
    """Its kind: the same link layer, HCA type and board (a 200 Gb/s SKU of one chip is not
    a peer of the 400 Gb/s one)."""
    return [r for r in rows if r is not row and r["state"] == "ACTIVE" and r["rate_gbits"] is not None
            and r["link_layer"] == row["link_layer"] and r["hca_type"] == row["hca_type"]
            and r["board_id"] == row["board_id"]]


def roce(row: dict[str, Any]) -> bool:
    """An ACTIVE RoCE port whose netdev MTU is known (iWARP's RNICs are Ethernet too)."""
    return (row["state"] == "ACTIVE" and row["link_layer"] == "Ethernet" and row["node_type"] != "RNIC"
            and row["netdev_mtu"] is not None)


def mtu_peers(rows: list[dict[str, Any]], row: dict[str, Any]) -> tuple[int, int | None]:
    """How many other ACTIVE RoCE ports of this host have a known MTU, and the MTU most of
    this host's use (itself counted; ties: the largest), None without others."""
    others = [r["netdev_mtu"] for r in rows if r is not row and roce(r)]
    if not others:
        return 0, None
    mtus = others + ([row["netdev_mtu"]] if roce(row) else [])
    return len(others), max(set(mtus), key=lambda mtu: (mtus.count(mtu), mtu))
