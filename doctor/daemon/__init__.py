"""The long-running side of llm-doctor: probes on schedules, a Prometheus exporter, alerts
with a lifecycle, and HTML incident reports (docs/daemon.md)."""
