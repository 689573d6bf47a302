"""Sidebar pages in display order. Part 2 adds Quantize, Benchmark and Server by appending
(module, class name) pairs here; the window builds whatever is listed, so Ctrl+1..n follow."""

PAGES: list[tuple[str, str]] = [
    ("npu_console.console.pages.dashboard", "DashboardPage"),
    ("npu_console.console.pages.models", "ModelsPage"),
    ("npu_console.console.pages.chat", "ChatPage"),
    ("npu_console.console.pages.quantize", "QuantizePage"),
    ("npu_console.console.pages.benchmark", "BenchmarkPage"),
    ("npu_console.console.pages.server", "ServerPage"),
]
