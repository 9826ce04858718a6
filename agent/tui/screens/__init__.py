"""Screens over the dashboard: help, a runbook, the full topology."""
