"""The commands: the command line, and the one place that builds a scan from flags and config."""
