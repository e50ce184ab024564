"""The ``llm-doctor`` console script.

``llm-doctor npd`` runs under node-problem-detector's 5 s kill every 30 s on every node, and
answers from a state file in tens of milliseconds, and ``llm-doctor slurm-healthcheck`` runs
inside slurmd's 60 s on every node; the whole command line imports the probes, the rules and
the renderers first (about half a second). So both are dispatched to their own light modules
before the rest is loaded; every other command goes to doctor/commands/cli.py, where both
are registered too (``python -m doctor.commands.cli npd`` answers the same).
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["npd"]:
        try:
            from doctor.commands import npd
        except Exception as exc:  # a broken install would exit 1 = a problem in NPD
            print(f"unknown llm-doctor npd cannot start: {type(exc).__name__}: {exc}"[:80])
            sys.exit(2)
        npd.main(sys.argv[2:])
    if sys.argv[1:2] == ["slurm-healthcheck"]:
        from doctor.commands import slurm

        slurm.main(sys.argv[2:])
        return
    from doctor.commands import cli

    cli.main()


if __name__ == "__main__":
    main()
