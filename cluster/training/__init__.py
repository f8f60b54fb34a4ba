"""Training scripts run inside cluster jobs (see README.md)."""
