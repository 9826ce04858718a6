"""The fleet view: every node's stage states read back from Prometheus, which already scrapes
every agent."""
