"""Tables as kubectl prints them, and ages as Kubernetes writes them (apimachinery's HumanDuration)."""

from __future__ import annotations

from datetime import datetime, timezone

# kubectl's tabwriter: cells at least 10 wide, 3 spaces of padding, the last column unpadded.
MIN_WIDTH, PADDING = 10, 3


def render_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = [headers] + rows
    widths = [max(MIN_WIDTH, max(len(line[i]) for line in lines) + PADDING) for i in range(len(headers))]
    out = []
    for line in lines:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])] + [line[-1]]
        out.append("".join(cells).rstrip())
    return "\n".join(out) + "\n"


def human_duration(seconds: float) -> str:
    """`5s`, `3m20s`, `4h10m`, `2d3h`, `1y20d`: the precision shrinks as the duration grows."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def since(value: str | None, now: datetime) -> str:
    when = parse_time(value)
    return human_duration((now - when).total_seconds()) if when else "<unknown>"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
