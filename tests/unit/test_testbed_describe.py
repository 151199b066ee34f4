"""What `eppkit up` prints (Testbed.describe): every component on its own line, at its own address."""

from types import SimpleNamespace

import pytest

from eppkit.plan import Endpoint
from eppkit.runtimes.local import LocalLauncher
from eppkit.runtimes.testbed import ServiceHandle, Testbed
from eppkit.topology import Topology

pytestmark = pytest.mark.unit


def line_of(text: str, name: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.split()[0] == name]
    return line


def test_pd_prints_the_decoders_own_address_and_the_sidecar_on_its_own_line(tmp_path):
    bed = Testbed(Topology(mode="direct", flow="pd"), LocalLauncher(), run_dir=tmp_path)
    bed._jaeger = SimpleNamespace(api_url="http://127.0.0.1:16686", otlp_grpc_endpoint="127.0.0.1:4317")
    bed.listen_port, bed.admin_port = 10000, 10001
    proc = object()
    bed.services = {
        "vllm-p0": ServiceHandle("vllm-p0", "http://127.0.0.1:9000", proc),
        "vllm-d0": ServiceHandle("vllm-d0", "http://127.0.0.1:9100", proc),
        "pd-sidecar-0": ServiceHandle("pd-sidecar-0", "http://127.0.0.1:9101", proc),
    }
    # Envoy routes to the sidecar, under the decoder's name (x-inference-pod names the decoder).
    bed.backends = [Endpoint("vllm-d0", "127.0.0.1", 9101, "decode", "mock-llm")]
    text = bed.describe()
    decoder = line_of(text, "vllm-d0")
    assert "http://127.0.0.1:9100" in decoder and "9101" not in decoder, text
    assert "role=decode" in decoder and "model=mock-llm" in decoder, text
    sidecar = line_of(text, "pd-sidecar-0")
    assert "http://127.0.0.1:9101" in sidecar and "vllm-d0" in sidecar, text
    assert "http://127.0.0.1:9000" in line_of(text, "vllm-p0"), text


def test_aggregated_prints_each_backend_once_with_its_role(tmp_path):
    bed = Testbed(Topology(), LocalLauncher(), run_dir=tmp_path)
    bed._jaeger = SimpleNamespace(api_url="http://127.0.0.1:16686", otlp_grpc_endpoint="127.0.0.1:4317")
    bed.services = {"vllm-0": ServiceHandle("vllm-0", "http://127.0.0.1:9000", object())}
    bed.backends = [Endpoint("vllm-0", "127.0.0.1", 9000, "both", "mock-llm")]
    text = bed.describe()
    assert [ln.split()[0] for ln in text.splitlines()].count("vllm-0") == 1
    assert "http://127.0.0.1:9000  role=both" in line_of(text, "vllm-0")
