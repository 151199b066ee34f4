"""The test suite in parallel: wall time, CPU and memory of a pytest run at several worker counts.

    python -m bench.suite                                   # this repository's `pytest` at -n 1, 2, 4 and 8
    python -m bench.suite --workers 0,4 -- -m "e2e and not load" --eppkit-runtime local   # a part of it
    python -m bench.suite --example ext-proc-routing        # an examples/ project, installed outside the checkout

Each run is ``pytest -n N --dist loadgroup <args>`` in a subprocess (``-n 0``: no workers at all), one
after the other. While it runs, every second, the bench reads from /proc and the cgroups what the run
uses: the CPU time and resident memory of pytest and every process under it (workers, services,
Envoys, Jaegers), and of the containers its workers started (the docker runtime: found by their
``eppkit.test-session`` label, read from ``/sys/fs/cgroup``). It reports, per worker count:

- **wall**: the run, start to exit;
- **CPU**: all of that CPU time (cores × seconds), its average in cores, and its peak over any 5 s;
- **peak memory**: the most resident memory the run held at once (its processes and its containers);
- **load**: the machine's 1-minute load average before and after, and what else used the CPU at the start
  (on a shared machine, other people's runs: the wall times are only comparable within one bench).

Results go to ``bench/results/suite-<time>.json`` and ``.md`` (the Markdown is printed too). The
example project gets a fresh virtualenv outside the checkout (the checkout installed into it, not
editable), as CI installs it, once per bench.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.system import busy_processes, loadavg, machine
from eppkit.core import procfs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CGROUP = Path("/sys/fs/cgroup")
TAG = "EPPKIT_TEST_SESSION"
SAMPLE_S = 1.0
PEAK_WINDOW_S = 5.0
MAX_RUN_S = 4 * 3600  # one run's bound


# -- what a run uses, from /proc and the cgroups -----------------------------------------------------

def tree(root: int) -> dict[int, tuple[float, int]]:
    """Every live process under ``root`` (itself included): pid -> (CPU seconds, resident bytes).

    A process's CPU counts its children that have exited and been waited for, so the sum over the live
    tree is the CPU of everything the run ran so far (save orphans that were re-parented away)."""
    stats = {}
    for pid in procfs.pids():
        st = procfs.parent_cpu_rss(pid)
        if st is not None:
            stats[pid] = st
    mine = {root} if root in stats else set()
    grew = True
    while grew:
        new = {pid for pid, (ppid, _, _) in stats.items() if ppid in mine} - mine
        mine |= new
        grew = bool(new)
    return {pid: stats[pid][1:] for pid in mine}


def run_tag(pids) -> str | None:
    """The run's session tag, from a worker's environment as it started (the controller handed it down)."""
    for pid in pids:
        for item in procfs.environ(pid):
            if item.startswith(f"{TAG}=".encode()):
                return item.split(b"=", 1)[1].decode().split("/")[0]
    return None


def containers(tag: str) -> dict[str, tuple[float, int]]:
    """The run's containers: id -> (CPU seconds, memory bytes), read from cgroup v1 or v2."""
    try:
        out = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", "label=eppkit.test-session",
                              "--format", '{{.ID}} {{.Label "eppkit.test-session"}}'],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in out.splitlines():
        cid, _, label = line.partition(" ")
        if not label.startswith(f"{tag}/"):
            continue
        cpu = _read_int(CGROUP / "cpuacct" / "docker" / cid / "cpuacct.usage")
        mem = _read_int(CGROUP / "memory" / "docker" / cid / "memory.usage_in_bytes")
        if cpu is None:  # cgroup v2
            unified = CGROUP / "system.slice" / f"docker-{cid}.scope"
            stat = _read_text(unified / "cpu.stat")
            cpu = int(re.search(r"usage_usec (\d+)", stat).group(1)) * 1000 if stat else None
            mem = _read_int(unified / "memory.current")
        found[cid] = ((cpu or 0) / 1e9, mem or 0)
    return found


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    return int(text.split()[0]) if text else None


# -- one run -----------------------------------------------------------------------------------------

def measure(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict:
    """Run ``argv`` to its end, sampling what it uses; the figures."""
    load_before, others = loadavg(), busy_processes(2.0)
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        samples: list[tuple[float, float]] = []  # (time, CPU seconds so far)
        container_cpu: dict[str, float] = {}
        peak_rss, tag = 0, None
        try:
            while proc.poll() is None:
                if time.monotonic() - started > MAX_RUN_S:
                    os.killpg(proc.pid, signal.SIGINT)
                    proc.wait(timeout=120)
                    break
                procs = tree(proc.pid)
                tag = tag or run_tag(procs)
                boxes = containers(tag) if tag else {}
                for cid, (cpu, _) in boxes.items():
                    container_cpu[cid] = cpu
                peak_rss = max(peak_rss, sum(r for _, r in procs.values()) + sum(m for _, m in boxes.values()))
                samples.append((time.monotonic() - started, sum(c for c, _ in procs.values())
                                + sum(container_cpu.values())))
                time.sleep(SAMPLE_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall = time.monotonic() - started
    cpu_total = max((c for _, c in samples), default=0.0)
    peak_cores = 0.0
    j = 0
    for i, (t, c) in enumerate(samples):
        while samples[j][0] < t - PEAK_WINDOW_S:
            j += 1
        if t - samples[j][0] >= PEAK_WINDOW_S * 0.8:
            peak_cores = max(peak_cores, (c - samples[j][1]) / (t - samples[j][0]))
    text = log.read_text(errors="replace")
    summary = re.findall(r"=+ (.*?(?:passed|failed|error|skipped).*?) in [\d.]+s", text)
    return {"argv": argv, "exit": proc.returncode, "wall_s": round(wall, 1), "summary": summary[-1] if summary else "",
            "cpu_s": round(cpu_total, 1), "avg_cores": round(cpu_total / wall, 2) if wall else 0.0,
            "peak_cores_5s": round(peak_cores, 2), "peak_rss_gib": round(peak_rss / 2**30, 2),
            "containers": len(container_cpu), "load_before": load_before, "load_after": loadavg(),
            "others_at_start": others, "log": str(log)}


# -- what to run -------------------------------------------------------------------------------------

def example_venv(name: str, workdir: Path) -> tuple[Path, Path]:
    """A fresh virtualenv outside the checkout with the kit (not editable, with its xdist extra: an example
    that does not ask for pytest-xdist itself is still run on workers here) and the example installed, as CI
    does; (its pytest, the example's folder)."""
    venv, project = workdir / "venv", workdir / name
    if not (ROOT / "examples" / name / "pyproject.toml").is_file():
        known = sorted(p.name for p in (ROOT / "examples").iterdir() if (p / "pyproject.toml").is_file())
        raise SystemExit(f"bench.suite: no example {name!r}; the examples: {', '.join(known)}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet"]
    subprocess.run([*pip, f"{ROOT}[xdist]"], check=True)
    subprocess.run(["cp", "-r", str(ROOT / "examples" / name), str(project)], check=True)
    subprocess.run([*pip, "-e", str(project)], check=True)
    subprocess.run([str(venv / "bin" / "eppkit"), "bootstrap"], check=True, cwd=workdir)
    return venv / "bin" / "pytest", project


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"{report['target']} — `{' '.join(report['args']) or '(its own addopts)'}`, {report['started']}",
             "",
             f"Machine: {m['cpus']} × {m['cpu_model']}, {m['memory_gib']} GiB, Linux {m['kernel']}, "
             f"Python {m['python']}.",
             "",
             "| workers | wall | result | CPU (core·s) | avg cores | peak cores (5 s) | peak memory | load before → after "
             "| busy at start (others) |",
             "|--:|--:|---|--:|--:|--:|--:|---|---|"]
    for run in report["runs"]:
        wall = f"{int(run['wall_s'] // 60)} min {run['wall_s'] % 60:04.1f} s"
        load = f"{run['load_before'][0] if run['load_before'] else '?'} → {run['load_after'][0] if run['load_after'] else '?'}"
        lines.append(f"| {run['workers']} | {wall} | {run['summary'] or 'exit ' + str(run['exit'])} | {run['cpu_s']:.0f} "
                     f"| {run['avg_cores']:.2f} | {run['peak_cores_5s']:.2f} | {run['peak_rss_gib']:.2f} GiB | {load} "
                     f"| {', '.join(run['others_at_start'][:3]) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts, comma-separated (0: no workers)")
    parser.add_argument("--example", metavar="NAME", help="run examples/NAME from a fresh venv outside the checkout")
    parser.add_argument("--dist", default="loadgroup", help="pytest-xdist's --dist (default: loadgroup)")
    parser.add_argument("args", nargs="*", help="pytest's own arguments, after --")
    opts = parser.parse_args(argv)
    counts = [int(n) for n in opts.workers.split(",")]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != TAG}
    with tempfile.TemporaryDirectory(prefix="eppkit-bench-suite-") as tmp:
        if opts.example:
            pytest, cwd = example_venv(opts.example, Path(tmp))
            base, target = [str(pytest)], f"examples/{opts.example} (fresh venv outside the checkout)"
        else:
            base, cwd, target = [sys.executable, "-m", "pytest"], ROOT, "this repository's suite"
        report = {"target": target, "args": opts.args, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "machine": machine(), "runs": []}
        for n in counts:
            argv = [*base, "-p", "no:cacheprovider", "-n", str(n), *(["--dist", opts.dist] if n else []), *opts.args]
            print(f"[suite] -n {n}: {' '.join(argv)}", file=sys.stderr, flush=True)
            run = measure(argv, cwd, env, RESULTS / f"suite-{stamp}-n{n}.log")
            run["workers"] = n
            report["runs"].append(run)
            print(f"[suite] -n {n}: {run['wall_s']} s, {run['summary']}, load {run['load_before']} -> "
                  f"{run['load_after']}", file=sys.stderr, flush=True)
            (RESULTS / f"suite-{stamp}.json").write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(report)
    (RESULTS / f"suite-{stamp}.md").write_text(text)
    print(text)
    return 0 if all(run["exit"] == 0 for run in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
