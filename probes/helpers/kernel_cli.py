"""What the kernels' command lines share."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits 1 (argparse's default is 2)."""

    def error(self, message: str):
        self.exit(1, f"{self.prog}: error: {message}\n")
