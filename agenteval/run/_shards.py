"""One experiment run as N disjoint slices (``--shard K/N``), so any scheduler can spread it: a CI matrix, a
Kubernetes indexed job, a Slurm array. No coordinator: every shard computes the same split on its own.

A case belongs to one shard, chosen by a hash of its id, so a case's attempts run together and each shard
writes the snapshot of its own cases only (the ``cases`` table holds every case once). Every shard records
its own status rows in ``experiments``, with its ``K/N`` in the run's options; the ``experiments`` view
combines them (completed only once all N completed, ``partial`` while some have not started), so ``report``
and ``gate`` see one experiment and refuse to judge one that is partial. Each shard holds a lease of its own:
two processes never run the same shard, and ``--resume ID --shard K/N`` continues just that one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence

from ..dataset._cases import Case
from ..errors import UsageError

SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
MAX_SHARDS = 100_000
"""The most slices a run is cut into (a Kubernetes indexed job's limit); reports list every shard."""
EXPERIMENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""What an experiment id given on the command line may be: it names folders in the store."""


@dataclasses.dataclass(frozen=True)
class Shard:
    """The ``index``-th (from 1) of ``count`` slices of an experiment's cases."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"``, with 1 <= K <= N."""
        found = SHARD.match(text)
        if found is None:
            raise UsageError(f"--shard {text!r}: expected K/N, such as 2/4 (the second of four slices)")
        index, count = int(found.group(1)), int(found.group(2))
        if count > MAX_SHARDS:
            raise UsageError(f"--shard {text.strip()}: N must be at most {MAX_SHARDS}")
        if not 1 <= index <= count:
            raise UsageError(f"--shard {text}: K must be from 1 to N")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, case_id: str) -> bool:
        """Whether the case is this shard's: the same answer in every process and on every machine."""
        return shard_of(case_id, self.count) == self.index

    def cases(self, cases: Sequence[Case]) -> list[Case]:
        return [case for case in cases if self.holds(case.id)]


def shard_of(case_id: str, count: int) -> int:
    """The shard (1 to ``count``) a case belongs to."""
    digest = hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def shared_experiment_id(name: str) -> str:
    """The experiment id every shard of a run named ``name`` derives on its own."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:40] or "run"
    return f"{slug}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def checked_experiment_id(experiment_id: str) -> str:
    if not EXPERIMENT_ID.match(experiment_id):
        raise UsageError(
            f"--experiment {experiment_id!r}: an id is letters, digits, '.', '_' and '-' (at most 128), "
            "starting with a letter or digit"
        )
    return experiment_id
