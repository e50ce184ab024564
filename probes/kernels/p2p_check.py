"""P2P functional check (torch): can each GPU of a pair access the other, and does a copy
from one to the other read back as written.

For each pair a,b: ``torch.cuda.can_device_access_peer`` both ways, then a 16 MiB pattern
(bytes i mod 251, so a shifted or zeroed page shows) is written on GPU a, copied to GPU b,
copied back to the host and compared with the original. A copy through a broken P2P path
(ACS redirect with a translating IOMMU) reads back zeros or stale data, or hangs: the
caller (probes/gpu/p2p.py) runs this in a child process under a hard time limit
(probes/helpers/kernel_child.py). The bandwidth of a peer copy is gpu.bandwidth's
(probes/kernels/gpu_bandwidth.py); this checks content only. ``check_copy`` runs on the
CPU ("cpu" to "cpu") in the tests.

Prints one JSON object: ``{"pairs": [{"a", "b", "peer_access_ab", "peer_access_ba",
"copy_ok", "error"}]}``, or ``{"skipped": "no CUDA device"}``.
"""

from __future__ import annotations

import json
import sys

from probes.helpers.kernel_cli import OneLineParser

CHECK_BYTES = 16 << 20
MAX_PAIRS = 64


def check_copy(src: str, dst: str, nbytes: int = CHECK_BYTES) -> tuple[bool, str | None]:
    """Write a pattern on ``src``, copy it to ``dst`` and back; (equal, where it differs)."""
    import torch

    pattern = (torch.arange(nbytes, dtype=torch.int64) % 251).to(torch.uint8)
    on_src = pattern.to(src)
    on_dst = on_src.to(dst)
    if dst.startswith("cuda"):
        torch.cuda.synchronize(dst)
    back = on_dst.to("cpu")
    if torch.equal(back, pattern):
        return True, None
    first = int((back != pattern).nonzero()[0].item())
    return False, f"byte {first:,} of {nbytes:,} reads {int(back[first])}, wrote {int(pattern[first])}"


def check_pairs(pairs: list[tuple[int, int]], nbytes: int = CHECK_BYTES) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    count = torch.cuda.device_count()
    out: list[dict[str, object]] = []
    for a, b in pairs[:MAX_PAIRS]:
        if a >= count or b >= count:
            out.append({"a": a, "b": b, "error": f"torch sees {count} CUDA devices"})
            continue
        entry: dict[str, object] = {"a": a, "b": b, "peer_access_ab": torch.cuda.can_device_access_peer(a, b),
                 "peer_access_ba": torch.cuda.can_device_access_peer(b, a)}
        try:
            ok, where = check_copy(f"cuda:{a}", f"cuda:{b}", nbytes)
        except RuntimeError as exc:  # a CUDA error on the copy: the check's answer, not a crash
            ok, where = False, str(exc).splitlines()[0][:200]
        entry.update(copy_ok=ok, error=where)
        out.append(entry)
    return {"pairs": out}


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """"0-1,2-3" as [(0, 1), (2, 3)]."""
    out = []
    for part in text.split(","):
        a, sep, b = part.partition("-")
        if not sep or not a.isdigit() or not b.isdigit() or a == b:
            raise ValueError(f"pair {part!r} is not two GPU indexes as a-b")
        out.append((int(a), int(b)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="p2p_check", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", required=True, help="GPU pairs as 0-1,2-3")
    parser.add_argument("--cpu", action="store_true", help="copy cpu to cpu (the tests)")
    args = parser.parse_args(argv)
    try:
        if args.cpu:
            ok, where = check_copy("cpu", "cpu", 1 << 20)
            result: dict = {"pairs": [{"a": -1, "b": -1, "copy_ok": ok, "error": where}]}
        else:
            result = check_pairs(parse_pairs(args.pairs))
    except (RuntimeError, ImportError, ValueError, OSError) as exc:
        print(f"p2p_check: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
