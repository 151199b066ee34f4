"""The machine under the figures: description, load average, and per-process CPU and memory from /proc."""

from __future__ import annotations

import os
import platform
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict:
    """What the figures ran on. Written next to every table."""
    model, mhz = "unknown", None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz") and mhz is None:
                mhz = round(float(line.split(":", 1)[1]))
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
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
    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_cpu_seconds() -> dict[str, float]:
    """Whole-machine CPU time so far, from /proc/stat: busy, idle and steal (time the
    hypervisor ran someone else while this VM wanted the CPU), summed over all CPUs."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return {"busy": (user + nice + system + irq + softirq) / ticks, "idle": (idle + iowait) / ticks, "steal": steal / ticks}


def memory_kib(pid: int | None) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in KiB."""
    out: dict[str, int] = {}
    if not pid:
        return out
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out


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
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError):
                continue
            name = comm
            if comm.startswith("python") and len(cmdline) > 1:  # "python -m pytest" reads better as pytest
                args = [a.decode(errors="replace") for a in cmdline[1:4] if a]
                name = next((a.rsplit("/", 1)[-1] for a in args if not a.startswith("-")), comm)
                if "-m" in args:
                    name = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else name
            fields = stat.rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
            out[int(entry.name)] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
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
