"""Benchmarks: an offline batch sweep through the local engine, and a serving load generator
for any OpenAI-compatible endpoint. Both report progress, can be cancelled, and write JSON + CSV.
"""

from npu_console.engine.bench.offline import (
    BatchResult,
    OfflineConfig,
    OfflineResult,
    run_offline_sweep,
)
from npu_console.engine.bench.progress import BenchError, Progress
from npu_console.engine.bench.serving import (
    ServingConfig,
    ServingResult,
    arun_serving_benchmark,
    run_serving_benchmark,
)
from npu_console.engine.bench.stats import (
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
