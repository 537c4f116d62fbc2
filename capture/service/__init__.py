"""The persistent capture service: the log loop, its metrics and health."""
