"""Bottom-layer helpers any layer may use (the engine's vLLM face, the agent's receivers): they
import nothing of stagelens above them."""
