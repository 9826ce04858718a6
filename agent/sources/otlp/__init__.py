"""The agent as an engine's OTLP traces endpoint: the receiver keeping `llm_request` spans as
request timelines, its HTTP and gRPC transports (which hand bodies to its intake, intake.py), the
bounded decoding of a body, the forwarding to a collector, and the reading of one span into a
timeline."""
