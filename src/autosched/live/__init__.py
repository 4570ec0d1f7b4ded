"""autosched on a live scheduler: the revision store, connectors (Slurm, a fake for tests) and
the agent that runs the adaptive `Controller` on a running cluster's history.

Layer: above `autosched.adapt`, below the surfaces (CLI, service). Submodules are imported on
use, so `from autosched.live.store import RevisionStore` stays light.
"""
