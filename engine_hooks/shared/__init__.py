"""Bottom-layer code shared by the engine hooks' listeners and the agent's intake."""
