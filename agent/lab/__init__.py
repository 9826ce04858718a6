"""The lab: the bundled engine hosted with its hooks and a sampler (`host.py`), the workloads that
drive it (`workload.py`), the scenarios that reproduce each stage (`scenarios.py`), the settings
built from flags (`settings.py`), the diagnosis's fixes as settings (`fixes.py`), and a whole run
judged (`scenario_run.py`).

Nothing here is imported eagerly: the scenarios and settings are read without torch.
"""
