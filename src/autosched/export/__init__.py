"""Writing a tuned config out in the form a live scheduler reads (e.g. ``slurm.conf`` lines)."""

from .slurm import slurm_conf_lines, slurm_time

__all__ = ["slurm_conf_lines", "slurm_time"]
