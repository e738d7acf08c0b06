"""The Dask clusters ``python -m tritoncourse grade --cluster NAME`` starts (``distributed.py`` grades on them): a
``LocalCluster`` (one worker per GPU with ``--gpu``), a batch queue's (``dask-jobqueue``) or Kubernetes'
(``dask-kubernetes``), each configured by Dask's own configuration files."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from .executors import GradingStopped

CLUSTERS = {  # --cluster NAME -> the class that starts it (configured by Dask's configuration files)
    "local": "distributed.LocalCluster",
    "slurm": "dask_jobqueue.SLURMCluster",
    "pbs": "dask_jobqueue.PBSCluster",
    "sge": "dask_jobqueue.SGECluster",
    "lsf": "dask_jobqueue.LSFCluster",
    "htcondor": "dask_jobqueue.HTCondorCluster",
    "kubernetes": "dask_kubernetes.operator.KubeCluster",
}
INSTALL = {"dask_jobqueue": "pip install dask-jobqueue", "dask_kubernetes": "pip install dask-kubernetes"}


@dataclass
class ClusterOptions:
    cluster: str | None = None  # a CLUSTERS name
    scheduler: str | None = None  # an address (tcp://host:8786) or a scheduler file (JSON)
    workers: int = 2  # --cluster: workers to start (GPU: at most one per GPU)
    gpu: bool = False  # each task takes one GPU (worker resource "GPU")
    test_workers: int | None = None  # kernel-test processes per grading (None: each worker's cores / its tasks)
    worker_wait: float = 3600.0  # seconds with no worker before grading stops
    reconnect_wait: float = 600.0  # seconds without the scheduler before grading stops
    dashboard: str = ":8787"  # --cluster local: where the scheduler serves its dashboard (needs bokeh)


def visible_gpus() -> list[str]:
    """GPU indices this machine shows (CUDA_VISIBLE_DEVICES when set, else nvidia-smi's list)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def local_gpu_cluster_spec(gpus: list[str]) -> dict:
    """SpecCluster workers for one machine's GPUs: one worker process per GPU, which sees only that GPU and
    advertises the resource ``GPU=1`` (so it takes one grading at a time)."""
    from distributed import Nanny

    return {f"gpu{g}": {"cls": Nanny, "options": {"nthreads": 1, "resources": {"GPU": 1}, "name": f"gpu{g}",
                                                  "env": {"CUDA_VISIBLE_DEVICES": g}}} for g in gpus}


def _import(dotted: str):
    module, _, name = dotted.rpartition(".")
    try:
        mod = __import__(module, fromlist=[name])
    except ImportError as err:
        top = module.split(".")[0]
        how = INSTALL.get(top, "pip install " + top)
        raise GradingStopped(f"--cluster needs {top}, which is not installed here: {how} ({err})") from None
    return getattr(mod, name)


def start_cluster(o: ClusterOptions):
    """The cluster ``--cluster`` names, started with ``o.workers`` workers (Dask's configuration sets the rest)."""
    if o.cluster == "local":
        from distributed import LocalCluster, Scheduler, SpecCluster

        if o.gpu:
            gpus = visible_gpus()[:max(1, o.workers)]
            if not gpus:
                raise GradingStopped("--gpu: this machine shows no GPU (nvidia-smi -L, CUDA_VISIBLE_DEVICES).")
            return SpecCluster(workers=local_gpu_cluster_spec(gpus), scheduler={
                "cls": Scheduler, "options": {"dashboard_address": o.dashboard}}, name="tritoncourse")
        return LocalCluster(n_workers=o.workers, threads_per_worker=1, processes=True,
                            dashboard_address=o.dashboard, name="tritoncourse")
    if o.cluster not in CLUSTERS:
        raise GradingStopped(f"--cluster {o.cluster}: unknown; one of {', '.join(CLUSTERS)}.")
    cls = _import(CLUSTERS[o.cluster])
    kwargs = {}
    if o.gpu and o.cluster != "kubernetes":  # dask-jobqueue: each job's worker advertises its one GPU
        kwargs["worker_extra_args"] = ["--resources", "GPU=1"]
    cluster = cls(**kwargs)  # cores, memory, queue, account, job_extra_directives: Dask's jobqueue.yaml
    cluster.scale(o.workers)
    return cluster
