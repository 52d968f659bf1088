"""``--executor ray``: a run's trials as tasks on a Ray cluster, each writing straight to the shared store.

The driver (the process that ran ``agenteval run``) plans the run, holds its lease and records its status as a
local run does; it cuts the planned trials into chunks and submits them as Ray tasks, :data:`WINDOW_PER_CPU` per
CPU of the cluster at a time, another as each returns. A task makes the run again
in its worker (``_Run.for_worker``), gives its trials fresh ids, runs them ``concurrency`` at a time, scores them,
and publishes their spans and scores to the store itself, through writers of its own (file names are unique, so
workers never collide). It returns its trial rows, and the driver publishes them: a trial row is the trial's
commit, and only the driver writes them.

Exactly once, as ``--resume`` has it: a task lost with its worker or node is run again by Ray (``max_retries``);
what the lost attempt published has no trial row (the row was still to come), so it is as invisible as the spans
of a trial a killed local run never finished, and the retry's trials carry new ids. Ray hands the driver one
result per task however often it ran, and the driver keeps at most one row per (case, attempt), the key resume
reads, dropping any other deterministically (the first committed stays). A driver that dies leaves the run as a
killed local run does: ``--resume`` (with either executor) runs what has no row.

Stopping keeps what finished, as in a local run (``._ray_signal``): on Ctrl-C the tasks are told to stop and hand
back their finished trials, for :data:`STOP_SECONDS` before they are cancelled outright; a task that fails for good
lets the running ones finish and commit, and no task starts after it, before the run fails.

Rate limits are shared: one :class:`agenteval.models._ray_limiter.LimiterHost` actor per run holds one AIMD
limiter per model for the whole cluster. Progress moves on the driver as tasks finish.

Before the run is planned (:meth:`RayExecutor.ready`), so before anything is written: what the workers are sent
must pickle, the head must answer, and the cluster must have a CPU for a task; Ray itself would hang in each case,
or fail with the sent object's repr. A worker refuses a store that lacks the experiment, or the mark the driver
left in it for the run (``._store_mark``): another folder at the store's path (``_Run.for_worker``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agenteval_exporters.settings import env_number
from agenteval_instrumentation.masking import mask_text, masked_logger

from ..errors import AgentevalError, UsageError
from ..render._text_safety import visible
from ._loop import CANCEL_GRACE_SECONDS, run_to_the_end
from ._plan import trial_id
from ._ray_signal import FINISH, GO, STOP, start_task_signal, watching, word_of
from ._scheduler import TICK_SECONDS
from ._store_mark import marked
from ._trial import TrialPlan

if TYPE_CHECKING:
    from ._executors import RunRecipe
    from ._runner import _Run
    from ._trial import TrialRunner

NAMESPACE = "agenteval"
"""The Ray namespace of the driver and its limiter actor."""
MAX_RETRIES = 3
"""How often Ray runs a task again whose worker process or node was lost."""
CHUNKS_PER_CPU = 4
"""Tasks per CPU of the cluster: enough for a lost node to cost little and for fast nodes to take more."""
WINDOW_PER_CPU = 2
"""Tasks submitted at once per CPU of the cluster: one running and one queued behind it, so no CPU waits for the
driver. The others' trials stay in the driver's plan until a task returns, not in Ray's object store and scheduler,
so neither grows with the dataset, and a stopped run has few queued tasks to call off."""
logger = masked_logger(__name__)

TASK_CPUS = 1
"""The CPUs a task of the run asks for, and the task a run waiting for a CPU leaves pending."""
MAX_CHUNK = 1000
"""The most trials one task runs: its trial rows reach the store when it ends, so progress moves by chunks."""
LIMITS_TIMEOUT = 10.0
"""Seconds the driver waits for the limiter actor's figures at the end of the run."""
CONNECT_TIMEOUT = 10.0
"""Seconds the driver tries to reach the cluster's head before it says it cannot (Ray itself tries for minutes)."""
DEFAULT_PORT = 6379
"""The head's port when an address names none, as Ray reads it."""
STOP_SECONDS = 2 * TICK_SECONDS + CANCEL_GRACE_SECONDS + 10.0
"""After Ctrl-C, how long the driver waits for its tasks to return their finished trials before it cancels them
outright: a tick for a task to hear it, the cancelled trials' grace, and time to save what finished."""


class ClusterFailed(AgentevalError):
    """A task failed on the cluster for good: its own error, or its worker lost more often than Ray retries."""


class ClusterUnavailable(AgentevalError):
    """The cluster cannot be reached, or has no CPU to run a task on: said before anything is written."""


def require_ray() -> Any:
    """The ``ray`` module, or an error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--executor ray needs Ray: pip install 'agenteval[ray]' (on the driver and on every node)"
        ) from None
    return ray


def chunks(plans: Sequence[TrialPlan], cpus: int, concurrency: int) -> list[list[TrialPlan]]:
    """The trials cut into tasks: about :data:`CHUNKS_PER_CPU` per CPU, each at least ``concurrency`` trials
    (a task runs that many at once) and at most :data:`MAX_CHUNK`. A case's attempts stay in one task, in order,
    as they run in a local run (an agent that remembers what it was asked, like the mock, answers alike)."""
    size = max(concurrency, min(MAX_CHUNK, math.ceil(len(plans) / (max(cpus, 1) * CHUNKS_PER_CPU))))
    out: list[list[TrialPlan]] = [[]]
    for case_plans in _by_case(plans):
        if out[-1] and len(out[-1]) + len(case_plans) > size:
            out.append([])
        out[-1].extend(case_plans)
    return [chunk for chunk in out if chunk]


def _by_case(plans: Sequence[TrialPlan]) -> list[list[TrialPlan]]:
    groups: dict[str, list[TrialPlan]] = {}
    for plan in plans:
        groups.setdefault(plan.case.id, []).append(plan)
    return list(groups.values())


@dataclasses.dataclass
class ChunkDone:
    """What a task hands back: its trials' rows (to publish), the model calls its cache answered, where it ran."""

    rows: list[dict[str, Any]]
    cache_hits: int
    worker: str
    node: str
    started: bool = True
    """False for a task the driver's signal told not to start: it ran nothing."""


def run_chunk(recipe: RunRecipe, plans: list[TrialPlan], signal: Any) -> ChunkDone:
    """The Ray task: run ``plans`` in this worker, publish their spans and scores, return their rows; nothing
    when ``signal`` (a :class:`~agenteval.run._ray_signal.TaskSignal`) says not to start, and only the finished
    ones when it says to stop meanwhile."""
    import ray

    from ..models._limiter import use_limiters
    from ..models._ray_limiter import ClusterLimiter
    from ..tools._search import corpora_in_use
    from ._runner import _Run

    worker = f"{socket.gethostname()}:{os.getpid()}"
    node = ray.get_runtime_context().get_node_id()
    if run_to_the_end(word_of(signal)) != GO:
        return ChunkDone([], 0, worker, node, started=False)
    if recipe.limiters is not None:
        host = ray.get_actor(recipe.limiters, namespace=NAMESPACE)
        use_limiters(lambda key: ClusterLimiter(host, key))
    # New ids for every try of the task: spans an earlier, lost try published never join this one's.
    fresh = [dataclasses.replace(plan, trial_id=trial_id()) for plan in plans]
    with _working_folder(recipe.cwd):
        run = _Run.for_worker(recipe, fresh)
        try:
            rows, cache_hits = run_to_the_end(_chunk_until_told(run, signal))
        finally:
            _KEPT_CORPORA[:] = corpora_in_use()  # before the agent lets go of its search tool
            run.agent.release()
            use_limiters(None)
    return ChunkDone(rows, cache_hits, worker, node)


_KEPT_CORPORA: list[Any] = []
"""The corpora the last task of this worker process searched, indexed: its next task (of the same run: a worker
process serves one driver) reads a corpus file again only when the file changed (see ``indexed_corpus``)."""


async def _chunk_until_told(run: _Run, signal: Any) -> tuple[list[dict[str, Any]], int]:
    async with watching(signal, run.stop):
        return await run.run_chunk()


@contextlib.contextmanager
def _working_folder(path: str) -> Iterator[None]:
    """Run in ``path`` when this node has it; stay where the worker is otherwise."""
    before = os.getcwd()
    try:
        os.chdir(path)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.chdir(before)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@contextlib.contextmanager
def _cluster_messages_to(note: Callable[[str], None]) -> Iterator[None]:
    """The cluster's messages to the driver (a task failed and will be retried, a node died) shown as the run's
    notes, one line each, masked and made safe for a terminal, instead of printed raw on standard output, where they
    would land in the middle of ``--json``. Ray prints them from a thread through ``print_to_stdstream``."""
    from ray._private import worker

    loop = asyncio.get_running_loop()
    printing = getattr(worker, "print_to_stdstream", None)

    def to_notes(data: dict[str, Any], ignore_prefix: bool) -> None:
        for line in data.get("lines", []):
            first = ANSI.sub("", str(line)).strip().splitlines()[:1]
            if first:
                # Masked: a task's error quotes what failed (a URL with its ?api-key=).
                loop.call_soon_threadsafe(note, "ray: " + visible(mask_text(first[0])))

    if printing is None:  # a Ray that prints otherwise: its messages keep their own way
        yield
        return
    worker.print_to_stdstream = to_notes
    try:
        yield
    finally:
        worker.print_to_stdstream = printing


def _result(finished: asyncio.Future[Any], run: _Run) -> ChunkDone:
    """A task's result; a task that failed for good fails the run, saying how to run the rest."""
    from ray.exceptions import RayTaskError

    try:
        result: ChunkDone = finished.result()
    except Exception as exc:
        # A task's own exception comes inside Ray's, whose text is the task's traceback.
        cause = exc.cause if isinstance(exc, RayTaskError) else exc
        if isinstance(cause, AgentevalError):  # the user's to fix, such as an agent that cannot load on a node
            raise cause from exc
        text = ANSI.sub("", str(cause)).strip()
        first = visible(text.splitlines()[0] if text else "")
        raise ClusterFailed(
            f"a task of the run failed on the Ray cluster ({type(cause).__name__}: {first}). The trials committed "
            f"so far are kept; run `{run._resume_command()}` to run the rest"
        ) from exc
    return result


def _check_shippable(ray: Any, shipped: Mapping[str, Any]) -> None:
    """Each thing the workers are sent can be pickled, or an error naming the one that cannot."""
    for what, value in shipped.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is None or isinstance(item, str):
                continue
            try:
                ray.cloudpickle.dumps(item)
            except Exception as exc:
                name = getattr(item, "name", None) or getattr(item, "__qualname__", None) or type(item).__name__
                text = str(exc).strip().splitlines()
                raise UsageError(
                    f"--executor ray: {what} ({visible(str(name))}) cannot be sent to the cluster's workers "
                    f"({type(exc).__name__}: {visible(text[0] if text else '')}): give it by name (FILE.py:ATTR or "
                    "MODULE:ATTR, which every worker imports), or make what it holds (a lock, a client, an open "
                    "file) inside it rather than around it"
                ) from None


def _cluster_address(given: str | None) -> tuple[str | None, str]:
    """The cluster's address and where it came from: ``--ray-address``, else ``$RAY_ADDRESS``, else none (a Ray
    started on this machine)."""
    if given:
        return given, "--ray-address"
    return os.environ.get("RAY_ADDRESS") or None, "$RAY_ADDRESS"


def _head(address: str) -> tuple[str, int] | None:
    """The host and port ``address`` reaches the head on; None for Ray's own words (``auto``, ``local``)."""
    where = address.split("://", 1)[-1].rstrip("/")
    if where in ("auto", "local", ""):
        return None
    host, colon, port = where.rpartition(":")
    if not colon or not port.isdigit() or host.endswith(":"):  # no port (an IPv6 address's last colon is its own)
        host, port = where, str(DEFAULT_PORT)
    return host.strip("[]"), int(port)


def _check_reachable(address: str, given: str) -> None:
    """The head at ``address`` accepts a connection and answers as a Ray head, or an error saying what to do: Ray's
    own connection attempt retries for minutes without a word (without end when something else answers there), and
    cannot be stopped with Ctrl-C meanwhile."""
    head = _head(address)
    if head is None:
        return
    try:
        socket.create_connection(head, timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise _unreachable(address, given, exc.strerror or str(exc) or "timed out") from None
    if not address.startswith("ray://"):  # a Ray Client server answers otherwise, and gives up by itself
        problem = _not_a_ray_head(head)
        if problem is not None:
            raise _unreachable(address, given, problem)


def _unreachable(address: str, given: str, why: str) -> ClusterUnavailable:
    return ClusterUnavailable(
        f"the Ray cluster at {visible(address)} ({given}) cannot be reached: {why}. Check that its head node runs "
        "(`ray start --head` prints the address to give) and that this machine reaches it; or leave out "
        "--ray-address (and $RAY_ADDRESS) to run on a Ray started on this machine"
    )


GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A call every Ray head's GCS serves: what a driver asks first when it connects."""
NOT_A_HEAD = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNIMPLEMENTED")
"""gRPC's answers when no Ray head is there: nothing that speaks gRPC, no answer in time, or another gRPC server
(a Ray Client server given without ``ray://``). Any other answer, an authentication refusal included, is a head's."""


def _not_a_ray_head(head: tuple[str, int]) -> str | None:
    """Why what listens at ``head`` is not a Ray head, asked with one gRPC call (Ray's own client would retry its
    handshake with anything else there without end); None when it is one."""
    import grpc

    host, port = head
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        call = channel.unary_unary(GCS_PROBE, request_serializer=bytes, response_deserializer=bytes)
        try:
            call(b"", timeout=CONNECT_TIMEOUT)
        except grpc.RpcError as exc:
            code = exc.code()
            if code is not None and code.name in NOT_A_HEAD:
                details = str(exc.details() or code.name).strip().splitlines()
                return f"what answers at {visible(target)} is not a Ray head ({visible(details[0] if details else '')})"
    return None


CPU_WAIT_SECONDS = 600.0
"""How long a run waits for its cluster to have a CPU for tasks (``AGENTEVAL_RAY_CPU_WAIT``): an autoscaling cluster
may start with none and add a node within minutes."""
ENV_CPU_WAIT = "AGENTEVAL_RAY_CPU_WAIT"
WITHOUT_AUTOSCALER = "and no autoscaler to add a node (its nodes were started by hand, none with a CPU for tasks)"
"""Why a cluster without a CPU is refused at once under Ray's autoscaler v1: no node will join unless someone
starts one."""
NO_NODE_TO_ADD = (
    "and its autoscaler reports that it can add no node with one (its nodes were started by hand, or every node type "
    "it may add lacks a CPU or is at its most)"
)
"""Why a cluster without a CPU is refused at once under Ray's autoscaler v2."""


def _wait_for_cpus(ray: Any, address: str | None, given: str) -> None:
    """Return once the cluster has a CPU for a task (each takes one), saying so while it waits; an error at once
    for a cluster known to have no autoscaler, or whose autoscaler says it cannot add a CPU, and once
    :data:`CPU_WAIT_SECONDS` pass without a CPU otherwise, since its tasks would wait forever."""
    if _has_cpu(ray):
        return
    where = f"at {visible(address)} ({given})" if address else "started on this machine"
    join = visible(address) if address else "ADDRESS"
    if _without_autoscaler(ray):
        raise _no_cpu(where, join, WITHOUT_AUTOSCALER)
    wait = max(0.0, env_number(ENV_CPU_WAIT, CPU_WAIT_SECONDS))
    logger.warning(
        "the Ray cluster %s has no CPU for tasks yet: waiting up to %s s for a node to join (an autoscaler may be "
        "adding one; `ray start --address=%s` adds one by hand)",
        where,
        f"{wait:g}",
        join,
    )
    # An autoscaler adds nodes for the tasks that wait, and none of the run's waits yet: this one stands for them.
    # Autoscaler v2 also answers for it: a demand it can never meet is reported infeasible.
    wanting = ray.remote(_nothing).options(num_cpus=TASK_CPUS).remote()
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))
            if _has_cpu(ray):
                return
            if _without_autoscaler(ray):  # the head's first report may come a few seconds after it started
                raise _no_cpu(where, join, WITHOUT_AUTOSCALER)
            if _cpu_infeasible(ray):
                raise _no_cpu(where, join, NO_NODE_TO_ADD)
    finally:
        with contextlib.suppress(Exception):
            ray.cancel(wanting, force=True)
    raise _no_cpu(
        where,
        join,
        f"after waiting {wait:g} s (no node with a CPU joined, nor did its autoscaler add one)",
        f"; ${ENV_CPU_WAIT} sets how long to wait",
    )


def _no_cpu(where: str, join: str, why: str, more: str = "") -> ClusterUnavailable:
    return ClusterUnavailable(
        f"the Ray cluster {where} has no CPU for tasks {why}: add one with `ray start --address={join}`, then run "
        f"again{more}"
    )


def _nothing() -> None:
    """The task a run waiting for a CPU leaves pending, so that an autoscaler sees a CPU wanted."""


def _has_cpu(ray: Any) -> bool:
    return bool(ray.cluster_resources().get("CPU", 0) >= TASK_CPUS)


def _without_autoscaler(ray: Any) -> bool:
    """Whether the cluster's head reports that no autoscaler can add a node to it: its monitor (Ray's autoscaler
    v1, what ``ray start --head`` runs) mirrors the nodes started by hand, through Ray's read-only provider. Ray says
    so nowhere public, so this reads the monitor's report (what ``ray status`` shows); a head whose report is
    missing or reads otherwise (an autoscaler's node types, autoscaler v2, which reports elsewhere, a KubeRay head
    without a monitor, a Ray that words it differently) is not known to lack one."""
    try:
        from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
        from ray.autoscaler._private.util import format_readonly_node_type
        from ray.experimental.internal_kv import _internal_kv_get

        report = json.loads(_internal_kv_get(DEBUG_AUTOSCALING_STATUS) or b"{}")
        nodes = report["autoscaler_report"]["node_type_mapping"]
        return bool(nodes) and all(kind == format_readonly_node_type(node) for node, kind in nodes.items())
    except Exception:  # whatever Ray changed, the run then waits as for an autoscaling cluster
        return False


def _cpu_infeasible(ray: Any) -> bool:
    """Whether the cluster's autoscaler v2 (what ``ray up`` and KubeRay start since Ray 2.50, and
    ``RAY_enable_autoscaler_v2=1`` on any head) reports a demand for no more than :data:`TASK_CPUS` as one it cannot
    meet with any node it may add: so it reports the pending task of a run waiting on a cluster started by hand, or
    on one whose node types have no CPU or are at their most. Read from the state the autoscaler reports to the
    head, as the head answers ``ray.autoscaler.v2.sdk.get_cluster_status`` (whose status object, what ``ray status``
    prints, leaves these requests out). A head without autoscaler v2 reports none, nor does a Ray that reads
    otherwise."""
    try:
        from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply  # type: ignore[attr-defined]  # generated
        from ray.experimental.internal_kv import internal_kv_get_gcs_client

        reply = GetClusterStatusReply.FromString(internal_kv_get_gcs_client().get_cluster_status())
        return any(_within_wanted(request) for request in reply.autoscaling_state.infeasible_resource_requests)
    except Exception:  # whatever Ray changed, the run then waits as for an autoscaling cluster
        return False


def _within_wanted(request: Any) -> bool:
    """Whether an infeasible request asks for no more than the run's waiting task: CPUs only, no more of them, on
    any node (a request bound to labels or placements can be infeasible where the run's task is not)."""
    bundle = dict(request.resources_bundle)
    bound = bool(request.placement_constraints) or any(
        selector.label_constraints for selector in request.label_selectors
    )
    return not bound and set(bundle) == {"CPU"} and bundle["CPU"] <= TASK_CPUS


class RayExecutor:
    """Trials as Ray tasks on the cluster at ``address`` (else ``$RAY_ADDRESS``, else a local cluster)."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self.ray = require_ray()  # said before anything is written

    @contextlib.contextmanager
    def ready(self, shipped: Mapping[str, Any]) -> Iterator[None]:
        """Connected to the cluster (unless this process already is), which has a CPU for tasks, with ``shipped``
        checked to be sendable; each said before anything is written."""
        ray = self.ray
        _check_shippable(ray, shipped)
        address, given = _cluster_address(self.address)
        connected_here = not ray.is_initialized()
        if connected_here:
            if address is not None:
                _check_reachable(address, given)
            ray.init(
                address=address,
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        try:
            _wait_for_cpus(ray, address, given)
            yield
        finally:
            if connected_here:
                ray.shutdown()

    async def run(self, run: _Run, runner: TrialRunner) -> None:
        with _cluster_messages_to(run.progress.note):
            await self._run(run)

    async def _run(self, run: _Run) -> None:
        if not run.plans:
            return
        with marked(run.store.root, run.experiment.experiment_id) as mark:  # each task looks for it: see _store_mark
            await self._run_tasks(run, mark)

    async def _run_tasks(self, run: _Run, mark: str | None) -> None:
        ray = self.ray
        assert run.recipe is not None and run.sink is not None
        from ..models._ray_limiter import RETURNS, start_limiter_host

        name = f"agenteval-limiters-{uuid.uuid4().hex[:12]}"
        host = start_limiter_host(ray, name, NAMESPACE)
        signal = start_task_signal(ray)
        recipe = ray.put(dataclasses.replace(run.recipe, limiters=name, store_mark=mark))
        task = ray.remote(run_chunk).options(num_cpus=TASK_CPUS, max_retries=MAX_RETRIES, retry_exceptions=False)
        cut = chunks(run.plans, _cpus(ray), run.options.concurrency)
        tasks = _Tasks(lambda chunk: task.remote(recipe, chunk, signal), cut)
        stopper: asyncio.Future[Any] = asyncio.ensure_future(run.stop.wait())
        tally = _Tally()
        failure: AgentevalError | None = None
        deadline: float | None = None  # once stopped: when the tasks still running are cancelled outright
        try:
            while deadline is None or time.monotonic() < deadline:
                if deadline is None and failure is None:  # once stopped or failed, no task starts any more
                    tasks.top_up(WINDOW_PER_CPU * _cpus(ray))
                if not tasks.pending:
                    break
                watched = {*tasks.pending} if stopper.done() else {*tasks.pending, stopper}
                wait = TICK_SECONDS if deadline is None else min(TICK_SECONDS, deadline - time.monotonic())
                done, _ = await asyncio.wait(watched, timeout=max(wait, 0.0), return_when="FIRST_COMPLETED")
                for finished in done - {stopper}:
                    del tasks.pending[finished]
                    try:
                        tally.commit(run, _result(finished, run))
                    except AgentevalError as exc:  # the others' finished trials are still kept: see _FAILED
                        if failure is None:
                            failure = exc
                            signal.tell.remote(FINISH)
                            run.progress.note(_FAILED.format(error=exc))
                run.sink.flush()
                if stopper.done() and deadline is None:  # Ctrl-C: the tasks return what finished, for so long
                    deadline = time.monotonic() + STOP_SECONDS
                    signal.tell.remote(STOP)
            if failure is not None:
                raise failure
        finally:
            stopper.cancel()
            for ref in tasks.pending.values():  # the unfinished tasks' trials have no row: --resume runs them
                ray.cancel(ref, force=True)
            for finished in tasks.pending:
                finished.cancel()
            # The figures are for the summary: their loss must not hide why the run ended.
            with contextlib.suppress(Exception):
                run.limits.update(
                    ray.get(host.limits.options(concurrency_group=RETURNS).remote(), timeout=LIMITS_TIMEOUT)
                )
            ray.kill(host)
            ray.kill(signal)
        run.counts["ray_tasks"] = tasks.submitted
        run.counts["ray_worker_processes"] = len(tally.workers)
        run.counts["ray_nodes"] = len(tally.nodes)


def _cpus(ray: Any) -> int:
    """The cluster's CPUs now (an autoscaler may have added some since the run started)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class _Tasks:
    """The run's tasks: the chunks still to submit, in order, and the tasks submitted that have not returned."""

    def __init__(self, submit: Callable[[list[TrialPlan]], Any], cut: list[list[TrialPlan]]) -> None:
        self._submit = submit
        self._queued = collections.deque(cut)
        self.pending: dict[asyncio.Future[Any], Any] = {}
        self.submitted = 0

    def top_up(self, window: int) -> None:
        """Submit chunks until ``window`` tasks are out or none is left."""
        while self._queued and len(self.pending) < window:
            ref = self._submit(self._queued.popleft())
            self.pending[asyncio.wrap_future(ref.future())] = ref
            self.submitted += 1


_FAILED = (
    "a task failed for good ({error}); no task starts any more, the running ones finish and their trials are "
    "kept, then the run fails"
)
"""What the driver says when a task fails for good: a local run keeps the trials that finished, and so does this."""


@dataclasses.dataclass
class _Tally:
    """What the driver has committed: the (case, attempt) keys, and where the tasks that ran did."""

    committed: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    workers: set[str] = dataclasses.field(default_factory=set)
    nodes: set[str] = dataclasses.field(default_factory=set)

    def commit(self, run: _Run, result: ChunkDone) -> None:
        """Commit a task's rows, at most one per (case, attempt), the key resume reads."""
        rows = [row for row in result.rows if (row["case_id"], row["attempt"]) not in self.committed]
        self.committed.update((row["case_id"], row["attempt"]) for row in rows)
        run.commit(rows, result.cache_hits)
        if result.started:
            self.workers.add(result.worker)
            self.nodes.add(result.node)
