"""Data the application ships: the demo model, calibration text, icons, themes.

Kept as a package so that wheels carry it; `engine.paths` finds it in a checkout and when installed.
"""
