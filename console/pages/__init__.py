"""Sidebar pages in display order. Part 2 adds Quantize, Benchmark and Server by appending
(module, class name) pairs here; the window builds whatever is listed, so Ctrl+1..n follow."""

PAGES: list[tuple[str, str]] = [
    ("console.pages.dashboard", "DashboardPage"),
    ("console.pages.models", "ModelsPage"),
    ("console.pages.chat", "ChatPage"),
    ("console.pages.quantize", "QuantizePage"),
    ("console.pages.benchmark", "BenchmarkPage"),
    ("console.pages.server", "ServerPage"),
]
