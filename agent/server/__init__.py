"""The agent's HTTP API: `/metrics`, `/api/v1/...`, `/healthz`, and the lab's `/v1/completions`."""
