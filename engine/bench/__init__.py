"""Benchmarks: an offline batch sweep through the local engine, and a serving load generator
for any OpenAI-compatible endpoint. Both report progress, can be cancelled, and write JSON + CSV.
"""

from .offline import (
    BatchResult,
    OfflineConfig,
    OfflineResult,
    run_offline_sweep,
)
from .progress import BenchError, Progress
from .serving import (
    ServingConfig,
    ServingResult,
    arun_serving_benchmark,
    run_serving_benchmark,
)
from .stats import (
    SLO,
    Distribution,
    RequestRecord,
    ServingMetrics,
    compute_metrics,
)

__all__ = [
    "SLO", "BatchResult", "BenchError", "Distribution", "OfflineConfig", "OfflineResult",
    "Progress", "RequestRecord", "ServingConfig", "ServingMetrics", "ServingResult",
    "arun_serving_benchmark", "compute_metrics", "run_offline_sweep", "run_serving_benchmark",
]
