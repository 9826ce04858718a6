"""The stagelens agent: sampler, frames, diagnosis, exporters, HTTP API, TUI and CLI."""
