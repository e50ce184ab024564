"""Sequential read throughput of files past the page cache, in decimal MB/s, as one JSON line.

The measurement is probes/helpers/disk_read.py (host.storage runs it in its own process);
this is its command line, for a person or a child process:
``python -m probes.kernels.disk_read --max-bytes N --max-seconds S PATH [PATH...]``.
"""

from __future__ import annotations

import json
import sys

from probes.helpers.disk_read import measure as measure
from probes.helpers.kernel_cli import OneLineParser


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m probes.kernels.disk_read",
        description="Sequential read throughput (decimal MB/s) past the page cache, as JSON.",
    )
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--block-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("paths", nargs="+", metavar="PATH")
    args = parser.parse_args(argv)
    try:
        result = measure(
            paths=args.paths,
            max_bytes=args.max_bytes,
            max_seconds=args.max_seconds,
            block_bytes=args.block_bytes,
        )
    except (ValueError, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
