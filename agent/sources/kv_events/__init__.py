"""vLLM's KV-cache events read from outside, over a ZMQ subscription: block-level KV evidence."""
