"""Moved to console/jobs.py (the console's one job runner); kept for older imports."""

from ..jobs import BackgroundJob, JobCancelled, Reporter, fmt_eta

__all__ = ["BackgroundJob", "JobCancelled", "Reporter", "fmt_eta"]
