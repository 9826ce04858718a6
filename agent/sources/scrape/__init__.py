"""An engine read from its Prometheus `/metrics`: the text parsed into families, the rules they
pass, the engine and generation they come from, the backing off a heavy answer, the gauge poll
between scrapes, and the vLLM/SGLang source that fills the engine snapshot from one scrape window
(engine_source.py, window.py)."""
