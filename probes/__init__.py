"""Probes: each reads the host through the seam and returns one frozen record."""
