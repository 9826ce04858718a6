"""What the window's published figures (gauges, counters, coarse histograms, spans) infer of the
engine, each with how it was read: the snapshot's figures no engine publishes, the P99 wait's
bounds without spans, and the floor a step outlasting the scrapes leaves."""
