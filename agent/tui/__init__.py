"""The Textual TUI: which stage is firing, its evidence and its runbook at a glance.

Sources (local lab engine, a remote `stagelens serve`, a recorded bundle) are plain classes whose
`poll()` returns new frames; a worker thread calls it and posts the result as a message; the app
folds it into `TuiState` and redraws the panels on the main thread, inside `batch_update`.
"""
