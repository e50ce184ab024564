"""The ``llm-doctor`` console script.

``llm-doctor npd`` runs under node-problem-detector's 5 s kill every 30 s on every node, and
answers from a state file in tens of milliseconds, and ``llm-doctor slurm-healthcheck`` runs
inside slurmd's 60 s on every node; the whole command line imports the probes, the rules and
the renderers first (about half a second). So both are dispatched to their own light modules
before the rest is loaded; every other command goes to doctor/commands/cli.py, where both
are registered too (``python -m doctor.commands.cli npd`` answers the same).

Installed from a wheel, doctor/, probes/, reports/, checks/ and playbooks/ live in
site-packages/llm_doctor/, not in site-packages itself, where generic names would overwrite or
shadow another distribution's ``reports`` or ``checks`` (docs/packaging.md). The console
script imports this module as ``llm_doctor.doctor.commands.entry``; ``main`` puts that folder
first on this process's sys.path before anything says ``import doctor``; the kernels the
probes run as ``python -m probes.kernels.NAME`` are given it on their PYTHONPATH
(probes/helpers/kernel_child.kernel_env), and nothing else this process starts is. From a checkout
the folder is the repository's root, where the code already runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds doctor/ (llm_doctor/ installed)


def own_packages_first() -> None:
    """Make ``import doctor``, ``probes``, ``reports`` ... find this copy before any other."""
    root = str(ROOT)
    sys.path[:] = [root, *(p for p in sys.path if p != root)]


def main() -> None:
    own_packages_first()
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
