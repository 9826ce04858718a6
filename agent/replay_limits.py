"""How much a replay takes in, stated once: a bundle (`--replay FILE`) or an agent's window
(`--connect URL`) past these is refused with one line, before it is read or as soon as the count
passes, not read until memory runs out (1,000,000 requests ran past 60 s at 1.7 GB and rising; a 2
GB bundle of frames held 4 GB).

Each is well above a real recording: 10 minutes at 50 requests a second is 30,000 requests, a
bundle of ~60 MB (a timeline ~0.8 KB, an 8-GPU frame ~28 KB a second, the bundled engine's steps
~0.3 KB each). Past them, record a shorter window."""

# bytes of a bundle: five hours of an 8-GPU node's frames; held as Python objects, about twice that
MAX_BUNDLE_BYTES = 512 * 2**20
# requests replayed (timelines read): over half an hour at 50 a second; each costs ~5 KB through the
# read, the span fit and the simulation (a 10-minute recording of spans replays in ~170 MB), so ~0.5
# GB at most
MAX_REPLAY_REQUESTS = 100_000
# models the requests name: the bundled engine registers at most this many (its MAX_MODELS, the
# lab's --models; not imported: the agent reads replays without the engine); the span fit prices
# each request beside each other
MAX_REPLAY_MODELS = 64
# tokens the requests made: the simulation runs a step per token a request decodes (batched), so a
# window of a few requests claiming outputs of 131,072 tokens each would run for many minutes; 10
# minutes at 50 requests a second with 166-token outputs on average is ~5 million. Prompts cost a
# step per chunk: far more of them pass
MAX_REPLAY_OUTPUT_TOKENS = 5_000_000
MAX_REPLAY_PROMPT_TOKENS = 200_000_000
