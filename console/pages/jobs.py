"""Moved to console/jobs.py (the console's one job runner); kept for older imports."""

from npu_console.console.jobs import BackgroundJob, JobCancelled, Reporter, fmt_eta

__all__ = ["BackgroundJob", "JobCancelled", "Reporter", "fmt_eta"]
