"""npu-smi health states and error codes in words.

The status levels follow the driver's health query (DCMI `dcmi_get_device_health`: 0 normal,
1 minor alarm, 2 major alarm, 3 critical alarm; with several alarms the most severe one is the
chip's state), which npu-smi prints as OK / Warning / Alarm / Critical, and UNKNOWN when the
query fails. Error codes are printed by `npu-smi info -t health` as hex numbers with npu-smi's
own "Error Information" lines; we pair the two and never make up a meaning for a code.
"""

from __future__ import annotations

STATUS_MEANING = {
    "OK": "healthy: no alarm is raised on this chip",
    "WARNING": "minor alarm: the chip works, but an alarm is raised and needs a look",
    "ALARM": "major alarm: a fault affects the chip; read the error codes below",
    "CRITICAL": "critical alarm: the chip may stop working; move work off it and read the "
    "error codes",
    "UNKNOWN": "npu-smi could not read the chip's health (driver or device not answering)",
}

NO_TEXT = "npu-smi printed no description; look the code up in the Ascend fault-code reference"


def explain_status(status: str | None) -> str | None:
    """The status in words, or None when there is no status; an unlisted status is named."""
    if not status:
        return None
    meaning = STATUS_MEANING.get(status.strip().upper())
    return meaning or f"status {status!r} is not one npu-smi documents"


def explain_codes(codes, info) -> list[tuple[str, str]]:
    """(code, text) per error code: npu-smi's information line for it, in the order printed
    (one line per code where the counts match, all lines on each code otherwise)."""
    codes, info = list(codes), [line for line in info if line]
    if not codes:
        return []
    if len(info) == len(codes):
        return list(zip(codes, info))
    joined = "; ".join(info) if info else NO_TEXT
    return [(code, joined) for code in codes]
