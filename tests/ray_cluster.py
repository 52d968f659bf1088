"""A real Ray cluster on this machine for the tests and benchmarks, reachable on loopback only.

Ray binds its servers to every address (``*``) and advertises the machine's outward one whatever
``--node-ip-address`` says, so the cluster runs inside a network namespace of its own whose only interface is
loopback (``unshare --net``; root, as on the project's machines and CI): a head node, worker nodes added with
:meth:`LoopbackRayCluster.add_node`, and the driver (``agenteval run --executor ray``) started in the same
namespace with :meth:`LoopbackRayCluster.popen`. Nothing it opens can be reached from outside the namespace, and
:meth:`LoopbackRayCluster.listeners` shows what listens there. Every process of the namespace is ended by
:meth:`LoopbackRayCluster.stop` (they are this cluster's and nobody else's).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent
PORT = 6379
"""The head's port, inside the namespace: no other process can hold it there."""
ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # A node that stops answering is declared dead after about 3 s instead of 30 s: its tasks are retried sooner.
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
}


PENDING_DEMANDS = f"""
import json
from ray._raylet import GcsClient
from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply
reply = GetClusterStatusReply.FromString(GcsClient("127.0.0.1:{PORT}").get_cluster_status(timeout_s=30))
state = reply.cluster_resource_state
print(json.dumps([dict(pending.request.resources_bundle) for pending in state.pending_resource_requests]))
"""
"""What a driver would ask the head for its autoscaler's use, asked without connecting as a driver."""


class LoopbackRayCluster:
    """A head node (``head_cpus`` CPUs for tasks) in a loopback-only network namespace; with ``autoscaled_cpus``,
    the head runs Ray's autoscaler, which adds up to ``autoscaled_nodes`` worker nodes with that many CPUs each when
    tasks wait for one. ``autoscaler_v2``: the head's monitor is Ray's autoscaler v2 (``RAY_enable_autoscaler_v2``,
    what ``ray up`` and KubeRay start since Ray 2.50), set on the head only, so the driver finds it out from the head;
    else v1, what ``ray start --head`` starts."""

    def __init__(
        self, head_cpus: int = 1, autoscaled_cpus: int = 0, autoscaled_nodes: int = 1, autoscaler_v2: bool = False
    ) -> None:
        self.head_cpus = head_cpus
        self.autoscaled_cpus = autoscaled_cpus
        self.autoscaled_nodes = autoscaled_nodes
        self.autoscaler_v2 = autoscaler_v2
        # Short: Ray's unix sockets live under it, and a socket's path is limited to 107 bytes.
        self.temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        (self.temp / "auth_token").write_text(secrets.token_hex(32))
        self.holder: subprocess.Popen[bytes] | None = None
        self.nodes: dict[int, int] = {}
        """node manager port -> CPUs, for each worker node added."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{PORT}"

    @property
    def netns(self) -> str:
        assert self.holder is not None
        return f"/proc/{self.holder.pid}/ns/net"

    def start(self) -> LoopbackRayCluster:
        if shutil.which("unshare") is None or shutil.which("nsenter") is None:
            raise RuntimeError("the Ray tests need unshare and nsenter (util-linux)")
        # The namespace lives as long as this process: every node and driver joins it with nsenter.
        self.holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep 86400"])
        deadline = time.monotonic() + 10
        # Until unshare has made its namespace, the holder is in this one: nsenter then joined the machine's own, where
        # loopback is up, and under load the head started there (port 6379 of the machine, and left running).
        while os.stat(self.netns).st_ino == os.stat("/proc/self/ns/net").st_ino:
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster's network namespace was not made")
            time.sleep(0.01)
        while "127.0.0.1" not in self.run(["ip", "-o", "addr"]).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError("the network namespace's loopback did not come up")
            time.sleep(0.05)
        head = ["start", "--head", f"--port={PORT}", f"--num-cpus={self.head_cpus}"]
        if self.autoscaled_cpus:
            head.append(f"--autoscaling-config={self._autoscaling_config()}")
        self._ray(*head)
        return self

    def _autoscaling_config(self) -> Path:
        """A cluster config for Ray's autoscaler with its ``fake_multinode`` provider (``RAY_FAKE_CLUSTER``), whose
        nodes are real raylets started on this machine (in this namespace) by the autoscaler itself."""
        path = self.temp / "autoscaling.json"
        most = self.autoscaled_nodes
        worker = {"resources": {"CPU": self.autoscaled_cpus}, "node_config": {}, "min_workers": 0, "max_workers": most}
        config = {
            "cluster_name": "agenteval-test",
            "max_workers": most,
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": 5,
            "provider": {
                # The fake provider by its class: by its type name, autoscaler v2 reads its defaults from an
                # example.yaml that Ray's wheel leaves out.
                "type": "external",
                "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
                "gcs_address": self.address,
                # Autoscaler v2 launches through the provider's batch call and knows the head by this id.
                "launch_multiple": self.autoscaler_v2,
                "head_node_id": fake_head_node_id(),
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
            },
            "available_node_types": {
                "ray.head.default": {"resources": {}, "node_config": {}, "max_workers": 0},
                "ray.worker.cpu": worker,
            },
            "head_node_type": "ray.head.default",
            "docker": {},
            "auth": {},
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
        }
        path.write_text(json.dumps(config))
        return path

    def add_node(
        self, cpus: int, node_manager_port: int, hide: Path | None = None, instead: Path | None = None
    ) -> None:
        """A worker node (a raylet and its worker processes) with ``cpus`` CPUs for tasks; ``hide``: a folder this
        node sees empty (an empty file system mounted over it, in a mount namespace of the node's own), as a node
        without a shared file system sees a folder of the driver's machine; or, given ``instead``, sees that folder
        in its place (bind-mounted), as a node sees its own folder at the same path."""
        args = ["start", f"--address={self.address}", f"--num-cpus={cpus}", f"--node-manager-port={node_manager_port}"]
        self._ray(*args, hide=hide, instead=instead)
        self.nodes[node_manager_port] = cpus

    def busy_workers(self, node_manager_port: int, task: str) -> int:
        """How many of a worker node's worker processes are running ``task`` (Ray titles them ``ray::TASK``)."""
        raylets = [p for p in self.processes() if f"--node_manager_port={node_manager_port}" in _cmdline(p)]
        return sum(_cmdline(c).startswith(f"ray::{task}") for r in raylets for c in _children(r))

    def titled(self, *tasks: str) -> list[str]:
        """The titles of the cluster's processes running one of ``tasks`` (a task's or an actor's name: Ray titles
        their worker processes ``ray::NAME``)."""
        titles = (_cmdline(process).split(" ", 1)[0] for process in self.processes())
        return [title for title in titles if any(title.startswith(f"ray::{task}") for task in tasks)]

    def pending_demands(self) -> list[dict[str, float]]:
        """The resources the cluster's tasks and actors wait for, as the head hands them to its autoscaler."""
        # A head busy under load can miss one client's connection: its GCS timed out once in a loaded full run.
        for _ in range(3):
            done = self.run([sys.executable, "-c", PENDING_DEMANDS], timeout=120)
            if done.returncode == 0:
                return list(json.loads(done.stdout.splitlines()[-1]))
        raise RuntimeError(f"reading the pending demands failed:\n{done.stderr}")

    def kill_node(self, node_manager_port: int) -> int:
        """SIGKILL a worker node's raylet and every process under it (its workers); how many were killed."""
        raylet = [p for p in self.processes() if f"--node_manager_port={node_manager_port}" in _cmdline(p)]
        victims = [p for r in raylet for p in [r, *_children(r, recursive=True)]]
        for process in victims:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.nodes.pop(node_manager_port, None)
        return len(victims)

    @property
    def env(self) -> dict[str, str]:
        # Token authentication on, with a token of this cluster's own: Ray turns it on by itself when it finds a
        # token (~/.ray/auth_token, which a local ray.init may have written), and then refuses nodes without it.
        env = {**os.environ, **ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.temp / "auth_token")}
        if self.autoscaled_cpus:  # the fake provider's switch, and the autoscaler looking every second
            env.update(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
        return env

    def _head_env(self) -> dict[str, str]:
        if not self.autoscaler_v2:
            return self.env
        v2 = {"RAY_enable_autoscaler_v2": "1"}
        if self.autoscaled_cpus:  # autoscaler v2 knows the head by its cloud instance: the fake provider's id for it
            v2["RAY_CLOUD_INSTANCE_ID"] = fake_head_node_id()
        return {**self.env, **v2}

    def popen(self, command: list[str], **options: object) -> subprocess.Popen[str]:
        """``command`` started inside the cluster's namespace (a driver, a loopback server)."""
        env = {**self.env, **dict(options.pop("env", {}) or {})}  # type: ignore[call-overload]
        return subprocess.Popen(["nsenter", f"--net={self.netns}", *command], env=env, text=True, **options)  # type: ignore[call-overload]

    def run(
        self, command: list[str], timeout: float = 300, env: dict[str, str] | None = None, **options: object
    ) -> subprocess.CompletedProcess[str]:
        env = env or self.env
        return subprocess.run(
            ["nsenter", f"--net={self.netns}", *command],
            env=env,
            text=True,
            capture_output=True,
            timeout=timeout,
            **options,  # type: ignore[arg-type]
        )

    def _ray(self, *args: str, hide: Path | None = None, instead: Path | None = None) -> None:
        head = ["--include-dashboard=false"] if "--head" in args else []
        # Every node in the cluster's own temporary folder: a node without one reads /tmp/ray, where another
        # cluster's session (and its authentication token) may be.
        common = [f"--temp-dir={self.temp}", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        command = [str(BIN / "ray"), *args, *head, *common]
        if hide is not None:  # the node's processes inherit the mount namespace, and the empty folder with it
            started = shlex.join(command)
            seen = f"--bind {shlex.quote(str(instead))}" if instead is not None else "-t tmpfs none"
            command = ["unshare", "--mount", "sh", "-c", f"mount {seen} {shlex.quote(str(hide))} && {started}"]
        done = self.run(command, env=self._head_env() if head else None)
        if done.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def processes(self) -> list[psutil.Process]:
        """Every process in the cluster's namespace but its holder."""
        assert self.holder is not None
        inode = os.stat(self.netns).st_ino
        if inode == os.stat("/proc/self/ns/net").st_ino:  # no namespace of its own yet: every process here would match
            return []
        found = []
        for process in psutil.process_iter():
            if process.pid == self.holder.pid:
                continue
            try:
                if os.stat(f"/proc/{process.pid}/ns/net").st_ino == inode:
                    found.append(process)
            except OSError:
                continue
        return found

    def listeners(self) -> list[str]:
        """The local addresses of the namespace's listening TCP sockets (``ss -ltn``)."""
        out = self.run(["ss", "-ltnH"]).stdout
        return [line.split()[3] for line in out.splitlines() if line.strip()]

    def addresses(self) -> list[str]:
        """The namespace's interface addresses (``ip -o addr``): loopback's only."""
        out = self.run(["ip", "-o", "addr"]).stdout
        return [line.split()[3] for line in out.splitlines() if line.strip()]

    def stop(self) -> None:
        if self.holder is None:
            return
        for process in self.processes():
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.holder.kill()
        self.holder.wait()
        self.holder = None
        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> LoopbackRayCluster:
        try:
            return self.start()
        except BaseException:  # a head that half started is stopped too
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fake_head_node_id() -> str:
    """The head's node id under Ray's fake provider (``ray start --head`` gives it when ``RAY_FAKE_CLUSTER`` is
    set)."""
    from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID

    return str(FAKE_HEAD_NODE_ID)


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _children(process: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
    try:
        return process.children(recursive=recursive)
    except psutil.Error:
        return []
