"""The machine under the figures: description, load average, and per-process CPU and memory from /proc."""

from __future__ import annotations

import os
import platform

from eppkit.core import procfs


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    """What the figures ran on. Written next to every table."""
    model, mhz = procfs.cpu_model()
    total = procfs.meminfo_kib("MemTotal")
    mem_gib = round(total / 1024 / 1024, 1) if total is not None else None
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "cpu_mhz": mhz,
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg(),
    }


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU of one process (all its threads) so far; None when it is gone."""
    return procfs.cpu_seconds(pid)


machine_cpu_seconds = procfs.machine_cpu_seconds


def memory_kib(pid: int | None) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in KiB."""
    return procfs.status_kib(pid, "VmRSS", "VmHWM") if pid else {}


class CpuMeter:
    """CPU used by named processes between ``start()`` and ``stop()``, as seconds and % of one core."""

    def __init__(self, pids: dict[str, int | None]):
        self.pids = {k: v for k, v in pids.items() if v}
        self._before: dict[str, float] = {}
        self._t0 = 0.0
        self.result: dict[str, dict[str, float]] = {}

    def start(self, now: float) -> "CpuMeter":
        self._t0 = now
        self._before = {k: cpu_seconds(p) or 0.0 for k, p in self.pids.items()}
        return self

    def stop(self, now: float) -> dict[str, dict[str, float]]:
        wall = max(1e-6, now - self._t0)
        for name, pid in self.pids.items():
            after = cpu_seconds(pid)
            if after is None:
                continue
            used = after - self._before.get(name, 0.0)
            self.result[name] = {"cpu_s": round(used, 3), "cpu_pct": round(100.0 * used / wall, 1)}
        return self.result


def busy_processes(seconds: float = 1.0, top: int = 5) -> list[str]:
    """Other processes (not this one, not its descendants) using CPU now ("pytest 85%"): next to the load average."""
    import time

    def snapshot() -> dict[int, tuple[str, float]]:
        out = {}
        parents: dict[int, int] = {}
        for pid in procfs.pids():
            comm, args, stat = procfs.name(pid), procfs.argv(pid), procfs.parent_cpu_rss(pid)
            if comm is None or args is None or stat is None:
                continue
            name = comm
            if comm.startswith("python") and len(args) > 1:  # "python -m pytest" reads better as pytest
                args = args[1:4]
                name = next((a.rsplit("/", 1)[-1] for a in args if not a.startswith("-")), comm)
                if "-m" in args:
                    name = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else name
            parents[pid] = stat[0]
            out[pid] = (name, procfs.cpu_seconds(pid) or 0.0)
        # Leave out this process and everything it started (the testbeds, vegeta): only the others.
        mine = {os.getpid()}
        grew = True
        while grew:
            new = {pid for pid, ppid in parents.items() if ppid in mine} - mine
            grew = bool(new)
            mine |= new
        return {pid: v for pid, v in out.items() if pid not in mine}

    a = snapshot()
    time.sleep(seconds)
    b = snapshot()
    usage: dict[str, float] = {}
    for pid, (name, cpu) in b.items():
        if pid not in a:
            continue
        used = cpu - a[pid][1]
        if used > 0.02 * seconds:
            usage[name] = usage.get(name, 0.0) + used
    ranked = sorted(usage.items(), key=lambda kv: -kv[1])[:top]
    return [f"{name} {100.0 * used / seconds:.0f}%" for name, used in ranked]
