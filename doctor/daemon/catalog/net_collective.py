"""The all-reduce across hosts' metrics (probes/net/xnode.py, net.collective).

A scan never runs it (it needs its peers: ``llm-doctor collective`` does, on every host); the
daemon reads back the last result the command kept (collective.json, within a day), so
these series appear where that result is fresh, or where its saved scan is rendered: busbw and the line it
is held against in bytes per second (GB/s x 1e9, as gpu.collective's), the ranks that never
joined and the pairwise suspects one series each, the interface and how the run ended as an
info series. Sentences for people (the failure, where the interface and the ceiling came
from) stay in the saved scan.
"""

from __future__ import annotations

from doctor.daemon.catalog.labels import Scheme, text
from doctor.daemon.catalog.rows import Table, each, gauge, info, missing, of, unexported

GBPS = 1e9  # GB/s → bytes/s
SENTENCE = "a sentence for people, shown by the command and kept in its saved scan"
# a pair of --pairwise: its round and its two ranks ("0-1"), which together name it
PAIR = Scheme(("round", "ranks"), ("round", "ranks"),
              lambda item, _i, _j: (text(getattr(item, "round", None)),
                                    "-".join(str(r) for r in getattr(item, "ranks", ()) or ())))

TABLES = (
    Table("net.collective", (
        info("", "net_collective_info", "How the all-reduce across hosts ran: backend (gloo, "
             "nccl), where the rank and world came from, the outcome, the step a failed run "
             "ended in, the socket interface and its kind",
             backend="backend", rendezvous="rendezvous", outcome="outcome",
             failed_step="failed_step", interface="interface", interface_kind="interface_kind"),
        unexported("master", "HOST:PORT of rank 0's store: in the saved scan, not a label"),
        gauge("world", "net_collective_ranks", "Ranks in the whole group, every host's"),
        of("members", "ranks_here", "net_collective_local_rank",
           "This host's ranks, one series each", "rank"),
        of("members", "missing_ranks", "net_collective_missing_rank",
           "A rank the master saw never join within the join deadline", "rank"),
        unexported("failure", f"why the run failed: {SENTENCE}"),
        unexported("interface_source", f"where the interface came from: {SENTENCE}"),
        gauge("mtu", "net_collective_interface_mtu_bytes", "MTU of the interface the ranks bound"),
        unexported("mtu_mismatch", f"the ranks' MTUs when they differ: {SENTENCE}"),
        gauge("line_gbps", "net_collective_line_bytes_per_second",
              "Line rate of the path, one direction (/sys/class/net/<if>/speed, or the ACTIVE "
              "InfiniBand ports' rates summed)", GBPS),
        unexported("line_source", f"where the line rate came from: {SENTENCE}"),
        gauge("stream_gbps", "net_collective_tcp_stream_bytes_per_second",
              "A TCP stream with the peer host, its slower direction, in the same run", GBPS),
        gauge("ceiling_gbps", "net_collective_ceiling_bytes_per_second",
              "What busbw is held against: the line rate, else the TCP stream", GBPS),
        unexported("ceiling_source", f"the ceiling's arithmetic: {SENTENCE}"),
        gauge("algbw_gbps", "net_collective_algorithm_bytes_per_second",
              "Size over the time of one all-reduce (nccl-tests' algbw)", GBPS),
        gauge("busbw_gbps", "net_collective_bus_bytes_per_second",
              "algbw x 2(n-1)/n (nccl-tests' busbw)", GBPS,
              ceiling="llm_doctor_net_collective_ceiling_bytes_per_second"),
        gauge("ratio", "net_collective_of_ceiling_ratio", "busbw over the ceiling"),
        each("pairs", PAIR),
        gauge("pairs.busbw_gbps", "net_collective_pair_bus_bytes_per_second",
              "--pairwise: one pair's busbw", GBPS),
        of("members", "suspects", "net_collective_suspect_rank",
           "--pairwise: a rank slow (under half the best pair) in every pair it was in", "rank"),
        unexported("starved", f"the CPU quota that throttled a rank: {SENTENCE}"),
        gauge("limit_s", "net_collective_limit_seconds", "The hard limit it ran under"),
        gauge("join_s", "net_collective_join_limit_seconds",
              "How long the master waited for every rank to join"),
        gauge("total_s", "net_collective_run_seconds", "The launcher's whole run"),
        gauge("kill_latency_s", "net_collective_kill_latency_seconds",
              "SIGKILL sent at the limit until every rank was gone"),
        gauge("age_s", "net_collective_result_age_seconds",
              "How old the result the daemon read back from collective.json is (a day at most: "
              "an older one is not judged)"),
        missing("missing", "net_collective_value_missing", "net.collective"),
    )),
)
