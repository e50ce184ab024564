"""An engine's parallel layout from its command line: tensor, pipeline, data and expert
parallelism and the hosts it spans (vLLM ``--tensor-parallel-size``/``-tp``,
``--pipeline-parallel-size``/``-pp``, ``--data-parallel-size``/``-dp`` with
``--data-parallel-size-local``, ``--enable-expert-parallel``, ``--nnodes``; SGLang ``--tp``/
``--tp-size``, ``--pp-size``, ``--dp``, ``--ep-size``, ``--nnodes``, ``--dist-init-addr``).
Where no flag says how many hosts, the GPUs it asks for (tp x pp) against this host's say it.
Source: ``/proc/<pid>/cmdline`` (probes/helpers/engine_reads.py). Manual equivalent:
``tr '\\0' ' ' < /proc/PID/cmdline``.
"""

from __future__ import annotations

from probes.helpers.engine_flags import flag


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and len(value) < 6 else None


def layout(args: list[str], gpus: int | None) -> dict:
    """The engine's parallel layout from vLLM's or SGLang's flags."""
    tp = _int(flag(args, "--tensor-parallel-size", "-tp", "--tp-size", "--tp"))
    pp = _int(flag(args, "--pipeline-parallel-size", "-pp", "--pp-size"))
    dp = _int(flag(args, "--data-parallel-size", "-dp", "--dp-size", "--dp"))
    dp_local = _int(flag(args, "--data-parallel-size-local", "-dpl"))
    ep_size = _int(flag(args, "--ep-size", "--ep", "--expert-parallel-size"))
    ep = True if "--enable-expert-parallel" in args or (ep_size or 0) > 1 else None
    nodes, nodes_from = _int(flag(args, "--nnodes")), "--nnodes"
    if nodes is None and dp and dp_local and dp > dp_local:
        nodes, nodes_from = -(-dp // dp_local), "--data-parallel-size / --data-parallel-size-local"
    if nodes is None and gpus:
        world = (tp or 1) * (pp or 1)
        nodes, nodes_from = -(-world // gpus), f"tp x pp = {world} against {gpus} GPUs here"
    return {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "nodes": nodes,
            "nodes_from": nodes_from if nodes is not None else None,
            "dist_init_addr": flag(args, "--dist-init-addr", "--master-addr", "--data-parallel-address"),
            "node_ip": flag(args, "--node-ip-address")}
