"""eppkit's pytest plugin: testbeds, a session Jaeger, traced clients and the leak check, for any project.

Installed with eppkit and loaded by pytest on its own (entry point ``pytest11``). What it gives:

| fixture | scope | what |
|---|---|---|
| ``eppkit_runtime`` | session | ``"local"`` or ``"docker"``; tests using a testbed run once per ``--eppkit-runtime`` |
| ``eppkit_jaeger`` | session | one Jaeger per runtime, shared by every testbed of the session |
| ``eppkit_control_plane`` | session | the session's Kubernetes control plane (etcd + kube-apiserver); testbeds whose EPP watches an InferencePool each get a namespace in it |
| ``eppkit_testbed_factory`` | function | ``make(Topology(...))`` -> a started testbed, stopped after the test |
| ``eppkit_shared_testbed_factory`` | module | the same, but one testbed per distinct topology, shared by the module's tests |
| ``eppkit_topology`` | function | the topology ``eppkit_testbed`` starts: ``@pytest.mark.eppkit_topology(mode=...)`` or override it |
| ``eppkit_testbed`` | function | a started testbed of ``eppkit_topology`` |
| ``eppkit_client`` | function | a traced client of ``eppkit_testbed`` (each request is the root span of its trace) |
| ``eppkit_ui`` | session | with ``--eppkit-ui``, the live trace UI (``.url``, ``.trace_url(trace_id)``); else None |
| ``eppkit_backend`` | session | the session's backend (:class:`eppkit.backends.Backend`), from the ``--eppkit-backend*`` options |
| ``eppkit_vllm_servers`` | session | the vllm preset's servers, started once when a topology first needs them and shared (:mod:`eppkit.runtimes.vllm_servers`) |

Options: ``--eppkit-runtime local|docker|all|a,b`` (or the ini key ``eppkit_runtime``; default local),
``--eppkit-keep-on-failure`` (stop at the first failing test and leave its testbed running until
Ctrl-C), ``--eppkit-runs DIR`` (run folders; default ``./runs``), ``--eppkit-ui`` (a live trace UI,
Zipkin's, fed from the session's Jaegers; its URL is printed when it is up), ``--eppkit-envoy-version V`` (or
the ini key ``eppkit_envoy_version``: the Envoy of every testbed whose Topology names none).

Backends: ``--eppkit-backend llm-d-inference-sim`` or ``vllm`` (or ``--eppkit-backend-url [name=]http://host:port[@model]``,
repeatable; ``--eppkit-prefill-url`` / ``--eppkit-decode-url`` for pd and ttft; ``--eppkit-backend-spans``)
puts that backend into every topology that does not name its own. A test that needs the kit's mock
(``x-mock-*`` steering headers, the mock's spans, its fault injection) is marked
``@pytest.mark.eppkit_needs_mock("why")`` and skipped, with that reason, against any other backend:
a skip by design, allowed in CI, not a missing prerequisite.

A missing prerequisite (Envoy, Jaeger, Docker) skips the test with a hint saying how to get it;
with ``CI=true`` it fails instead, because a skipped e2e test proves nothing (:func:`require`).
What a mode builds on its first use (GAIE's EPP, the control plane: minutes) is built once before the session's
first test, for the tests that need it (their ``eppkit_topology`` marker, the ``eppkit_control_plane`` fixture, or
``@pytest.mark.eppkit_prepare("gaie-epp")`` for topologies made in code), so no test's timeout pays for a build.
A failing test's report carries the last log lines of every component of its testbeds, and the
path of an HTML page of its requests' traces, written next to those logs. At the
end of the session, any process or container the kit started and nobody stopped fails the run.

The plugin's parts, each a module of this package (pytest loads them through ``pytest_plugins``):
:mod:`~eppkit.pytest_plugin.session` (options from eppkit.options, markers, what the session's options
put into topologies), :mod:`~eppkit.pytest_plugin.fixtures`, :mod:`~eppkit.pytest_plugin.failures`
(log tails and trace pages of a failed test), :mod:`~eppkit.pytest_plugin.leaks` (the leak check),
:mod:`~eppkit.pytest_plugin.parallel` (pytest-xdist: what each worker has of its own, the groups, the
run's live UI), :mod:`~eppkit.pytest_plugin.alone` (``eppkit_alone`` tests), :mod:`~eppkit.pytest_plugin.prepare`
(first-use builds before the first test).
"""

pytest_plugins = [
    "eppkit.pytest_plugin.parallel",
    "eppkit.pytest_plugin.session",
    "eppkit.pytest_plugin.prepare",
    "eppkit.pytest_plugin.failures",
    "eppkit.pytest_plugin.fixtures",
    "eppkit.pytest_plugin.leaks",
    "eppkit.pytest_plugin.alone",
]
