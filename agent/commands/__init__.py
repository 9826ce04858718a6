"""One module a command; `agent.cli` registers them."""
