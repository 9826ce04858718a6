"""The report's benchmark method as code: steady load, step stress to the first knee, one-variable
sweeps, and regression checks against a saved baseline — on the bundled engine or any
OpenAI-compatible endpoint.

Every point carries the diagnosis taken while it ran, so a knee comes with the stage that fired past
it.
"""
