"""Run one of the kit's aiohttp services: common flags, tracing, clean shutdown."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Awaitable, Callable, Protocol, Sequence

from aiohttp import web
from eppkit.core.settings import settings
from eppkit.observability import otel


def add_common_args(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind, or a comma list: one socket on each, all on --port (the pods of an "
                             "InferencePool served by one process) (default: %(default)s)")
    parser.add_argument("--port", type=int, default=default_port, help="port to bind (default: %(default)s)")
    parser.add_argument(
        "--otlp-endpoint",
        default=None,
        help=f"OTLP gRPC endpoint host:port for spans (default: ${otel.OTLP_ENDPOINT_ENV}; unset: no export)",
    )
    parser.add_argument("--log-level", default="INFO", help="Python log level (default: %(default)s)")


class Background(Protocol):
    """A task that runs beside the app (a picker's metrics scraper)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def serve(
    app: web.Application,
    *,
    host: str,
    port: int,
    name: str,
    on_ready: Callable[[], Awaitable[None]] | None = None,
    background: Sequence[Background] = (),
) -> None:
    """Serve ``app`` until SIGINT/SIGTERM, then flush spans and exit 0.

    ``background`` tasks start before the socket is bound (a picker's first scrape says which
    endpoints are up before its first request) and stop after the app stops serving.

    Prints ``<name> listening on http://host:port`` once the socket is bound; the
    testbed waits on /health rather than this line, but people read it.
    """

    async def main() -> None:
        # A short shutdown timeout: open streams must not hold a stopping service for aiohttp's default 60 s.
        for task in background:
            await task.start()
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        hosts = host.split(",")
        if len(hosts) > 1:
            _raise_open_files_limit()
        for one in hosts:
            await web.TCPSite(runner, one, port, backlog=4096, reuse_address=True).start()
        logging.getLogger(name).info("%s listening on http://%s:%d", name, host if len(hosts) == 1 else
                                     f"{{{hosts[0]} ... {hosts[-1]}: {len(hosts)} addresses}}", port)
        if on_ready is not None:
            await on_ready()
        await until_stopped()
        await runner.cleanup()
        for task in background:
            await task.stop()

    run_then_flush(lambda: run_loop(main()))


def run_then_flush(run: Callable[[], object]) -> int:
    """Run a service (``run`` returns when it has stopped), then flush its spans, whatever happened; 0."""
    try:
        run()
    finally:
        otel.shutdown_tracing()
    return 0


def _raise_open_files_limit() -> None:
    """Many addresses: a listening socket each, and a connection or two from every client of each."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def until_stopped() -> None:
    """Return at the first SIGINT or SIGTERM (a service's clean shutdown starts there)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def run_loop(coro):
    """Run ``coro`` on uvloop when it is installed (it is a dependency), else on asyncio's loop.

    uvloop's libuv timers and transports cut the per-token cost of a streaming mock,
    which is what holds hundreds of streams on time; ``EPPKIT_EVENT_LOOP=asyncio`` opts out.
    """
    if settings().event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run_mock(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, read_config: Callable,
             config_error: type[Exception], service: str, make_app: Callable[[object, object], web.Application],
             scope: str | None = None) -> int:
    """A mock's ``main``: its flags read into its config (a bad one is a usage error), logging,
    tracing as ``service`` with the config's instance (its spans in instrumentation ``scope``), then
    ``make_app(config, tracer)`` served."""
    args = parser.parse_args(argv)
    try:
        config = read_config(args)
    except config_error as exc:
        parser.error(str(exc))
    configure_logging(args.log_level)
    tracer = otel.setup_tracing(service, args.otlp_endpoint, instance=config.instance, scope=scope)
    serve(make_app(config, tracer), host=args.host, port=args.port, name=f"{service}[{config.instance}]")
    return 0
