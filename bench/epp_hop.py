"""`python -m bench.epp_hop`: the EPP hop of every EPP the kit hosts, as a multiple of the floor, in one run.

The floor is eppkit/floors (``-transport extproc``): a Go ext_proc server that answers every message at once and picks a fixed list
(no logic at all): what Envoy's gRPC stream to an EPP costs on this machine. Beside it the echo EPP (the same
in Python: ``python -m eppkit.services.echo_epp``), the kit's EPP (ext_proc, sidecar) and GAIE's EPP v1.5.0.
Every EPP gets its own testbed (two fast mocks: TTFT 5 ms, 1 ms per token), all up at once; rounds go through
the EPPs in turn so a busy moment of the machine hits them alike. Each request's hop is Envoy's own record of it
(eppkit.gateway.hop): ``hold`` (the end of the request to the upstream's start), ``epp_decision`` (the EPP's
headers reply, after the body ended), and for ``GET /v1/models`` the decision's true round trip.

    python -m bench.epp_hop                     # 3 rounds x 100 chat + 50 GET per EPP (~2 minutes)
    python -m bench.epp_hop --rounds 1 --requests 20

Writes bench/results/epp-hop-<time>.json and prints the Markdown table (docs/benchmarks.md quotes it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.system import loadavg, machine
from eppkit.observability import steps
from eppkit.runtimes import create, create_jaeger
from eppkit.runtimes.testbed import new_run_dir
from eppkit.services.vllm.config import MockLatency
from eppkit.topology import Topology, VllmSpec

RESULTS = Path(__file__).resolve().parent / "results"
FLOOR = "noop (Go)"
BODY_FLOOR = "noop (Go), decides after the body"
SIDECAR_FLOOR = "sidecar floor (Go EPP + Go frontend)"
OWN_FLOOR = {"echo (Python)": FLOOR, "kit ext_proc": BODY_FLOOR, "kit sidecar": SIDECAR_FLOOR,
             "GAIE EPP v1.5.0": BODY_FLOOR}  # each EPP's own floor: where it decides, over its own hops


def build_noop() -> Path:
    """The Go no-op EPP: the kit's ext_proc floor (eppkit/floors, built once per source version)."""
    from eppkit.builds.own_go import FLOORS

    return FLOORS.build(lambda m: print(m, file=sys.stderr, flush=True))


def epps(noop: Path) -> dict[str, tuple[str, dict]]:
    """name -> (mode, options) of every EPP measured."""
    python = sys.executable
    return {
        FLOOR: ("external-epp", {"epp_command": f"{noop} --port {{grpc_port}} --pick {{endpoints}}"}),
        BODY_FLOOR: ("external-epp", {"epp_command": f"{noop} --port {{grpc_port}} --pick {{endpoints}} -decide body"}),
        SIDECAR_FLOOR: ("external-epp", {"epp_command": f"{noop} --port {{grpc_port}} --pick {{endpoints}} -decide body "
                                                        "-frontend"}),
        "echo (Python)": ("external-epp", {"epp_command": f"{python} -m eppkit.services.echo_epp --port {{grpc_port}} "
                                                          "--endpoints {endpoints}"}),
        "kit ext_proc": ("ext_proc", {}),
        "kit sidecar": ("sidecar", {}),
        "GAIE EPP v1.5.0": ("gaie-epp", {}),
    }


def topology(mode: str, options: dict) -> Topology:
    return Topology(mode=mode, vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")], options={**options, "tracing": False},
                    latency=MockLatency(time_to_first_token=5.0, inter_token_latency=1.0))


def measure(bed, client, requests: int, gets: int) -> dict[str, list[float]]:
    body = {"model": bed.backends[0].model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2}
    sent_post, sent_get = [], []
    for _ in range(requests):
        sent_post.append(client.chat(body, timeout_s=30).trace_id)
    for _ in range(gets):
        sent_get.append(client.chat(None, path="/v1/models", method="GET", timeout_s=30).trace_id)
    time.sleep(0.3)  # Envoy writes its access log within 100 ms
    hops = {h.trace_id: h for h in bed.hops()}
    out: dict[str, list[float]] = {"hold": [], "epp_decision": [], "epp_release": [], "get_decision": []}
    for trace_id in sent_post:
        phases = hops[trace_id].phases() if trace_id in hops else {}
        for key in ("hold", "epp_decision", "epp_release"):
            if key in phases:
                out[key].append(phases[key])
    for trace_id in sent_get:
        phases = hops[trace_id].phases() if trace_id in hops else {}
        if "epp_decision" in phases:
            out["get_decision"].append(phases["epp_decision"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.epp_hop", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=100, help="chat requests per EPP and round (default: %(default)s)")
    p.add_argument("--gets", type=int, default=50, help="GET /v1/models per EPP and round (default: %(default)s)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    noop = build_noop()
    values: dict[str, dict[str, list[float]]] = {}
    started = time.monotonic()
    load_before = loadavg()
    with create_jaeger("local", new_run_dir("jaeger-epp-hop")) as jaeger:
        beds = {name: create(topology(mode, options), jaeger=jaeger).start() for name, (mode, options) in epps(noop).items()}
        try:
            clients = {name: bed.client() for name, bed in beds.items()}
            for name, bed in beds.items():  # warm up: first streams, first connections
                measure(bed, clients[name], 10, 5)
            for _ in range(args.rounds):
                for name, bed in beds.items():
                    for key, got in measure(bed, clients[name], args.requests, args.gets).items():
                        values.setdefault(name, {}).setdefault(key, []).extend(got)
        finally:
            for bed in beds.values():
                bed.stop()
    summary = {name: {key: steps.summarize(v) for key, v in by.items() if v} for name, by in values.items()}
    report = {"created": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine(), "load_before": load_before,
              "load_after": loadavg(), "wall_s": round(time.monotonic() - started, 1), "rounds": args.rounds,
              "requests": args.requests, "gets": args.gets, "summary": summary}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / time.strftime("epp-hop-%Y%m%d-%H%M%S.json")
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(markdown(report))
    print(f"\n(numbers: {path})")
    return 0


def markdown(report: dict) -> str:
    summary = report["summary"]
    floor = summary[FLOOR]

    def cell(name: str, key: str) -> str:
        v = summary[name].get(key)
        if not v:
            return "–"
        times = v["p50"] / floor[key]["p50"] if floor.get(key) and floor[key]["p50"] else None
        return f"{v['p50']:.2f} / {v['p90']:.2f}" + (f" (×{times:.1f})" if times and name != FLOOR else "")

    def own(name: str) -> str:
        """The hold's p50 over that of the floor deciding where this EPP does, over the same hops (OWN_FLOOR)."""
        base = summary.get(OWN_FLOOR.get(name, ""), {}).get("hold")
        v = summary[name].get("hold")
        return f"×{v['p50'] / base['p50']:.1f} ({OWN_FLOOR[name]})" if v and base and base["p50"] else "–"

    lines = [f"EPP hop, Envoy's record (ms, p50 / p90; ×: the p50 as a multiple of the Go no-op's). "
             f"{report['rounds']} rounds × {report['requests']} chat + {report['gets']} GET per EPP; "
             f"{report['created']}; load {report['load_before']} → {report['load_after']}.", "",
             "| EPP | hold (body end → upstream) | decision after the body | body released | GET decision (round trip) "
             "| hold × its own floor |",
             "|---|--:|--:|--:|--:|--:|"]
    for name in summary:
        lines.append(f"| {name} | {cell(name, 'hold')} | {cell(name, 'epp_decision')} | {cell(name, 'epp_release')} | "
                     f"{cell(name, 'get_decision')} | {own(name)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
