"""The seam: every read of the host goes through a Host, live or recorded."""
