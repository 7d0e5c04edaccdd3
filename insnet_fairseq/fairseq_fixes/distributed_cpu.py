"""Let fairseq 0.12's distributed engine train on CPU workers (gloo), as it does on GPUs (NCCL).

fairseq assumes one CUDA device per worker. On a machine without one:

* ``--distributed-world-size N`` spawns ``min(torch.cuda.device_count(), N)`` = 0 processes (and
  ``_infer_single_node_init`` asserts N <= 0);
* under ``torchrun`` (``env://``), ``device_id = rank % torch.cuda.device_count()`` divides by zero;
* the default ``--distributed-backend nccl`` needs CUDA;
* ``--ddp-backend pytorch_ddp`` wraps the model with ``device_ids=[device_id]``, which
  ``DistributedDataParallel`` refuses for a module on the CPU.

Here, when CUDA is unavailable: N worker processes are spawned, the device id is 0, the backend
is gloo (logged), and DDP gets ``device_ids=None``. Nothing changes where CUDA is available.
Installed when ``insnet_fairseq`` is imported (``--user-dir``), which fairseq does before it
starts the workers.

Bug: fairseq's own answer is that distributed training on CPU is not supported
(https://github.com/facebookresearch/fairseq/issues/2879); the failing call is
``fairseq.distributed.utils._infer_single_node_init(cfg)`` with ``distributed_world_size=2`` and no GPU
(``AssertionError: world size is 2 but have 0 available devices``, ``tests/unit/test_fairseq_fixes.py``). A run
that does not ask for several workers, or that has CUDA, goes through fairseq's own functions.
"""
import logging
import os
import random

import torch
from fairseq.distributed import utils as du
from fairseq.models import distributed_fairseq_model as dfm

logger = logging.getLogger(__name__)


def _cpu() -> bool:
    return not torch.cuda.is_available()


def _use_gloo(cfg) -> None:
    """cfg: DistributedTrainingConfig."""
    if _cpu() and cfg.distributed_backend == "nccl":
        logger.info("no CUDA device: distributed training on CPU workers with --distributed-backend gloo")
        cfg.distributed_backend = "gloo"


def install() -> None:
    if getattr(du, "_insnet_cpu_fix", False):
        return
    du._insnet_cpu_fix = True
    single_node, torch_launch, infer, call_main = (
        du._infer_single_node_init, du._infer_torch_distributed_launch_init, du.infer_init_method, du.call_main)

    def infer_single_node_init(cfg):
        if not _cpu():
            return single_node(cfg)
        if cfg.distributed_port <= 0:
            cfg.distributed_port = random.randint(10000, 60000)
        cfg.distributed_init_method = f"tcp://localhost:{cfg.distributed_port}"

    def infer_torch_distributed_launch_init(cfg):
        if not _cpu():
            return torch_launch(cfg)
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0
        cfg.distributed_no_spawn = True  # torchrun started the processes

    def infer_init_method(cfg, force_distributed=False):
        infer(cfg, force_distributed)
        if _cpu() and cfg.distributed_init_method is None and cfg.distributed_world_size > 1:
            infer_single_node_init(cfg)  # fairseq leaves a --distributed-port without Slurm undistributed
        if _cpu() and cfg.distributed_init_method is not None and not cfg.distributed_no_spawn:
            cfg.distributed_num_procs = cfg.distributed_world_size

    def cpu_call_main(cfg, main, **kwargs):
        dcfg = cfg.distributed_training
        if dcfg.distributed_init_method is None:
            infer_init_method(dcfg)
        if not _cpu() or dcfg.distributed_init_method is None:
            return call_main(cfg, main, **kwargs)
        _use_gloo(dcfg)
        if dcfg.distributed_no_spawn:
            return du.distributed_main(dcfg.device_id, main, cfg, kwargs)
        kwargs["start_rank"] = dcfg.distributed_rank
        dcfg.distributed_rank = None  # assigned per process
        procs = dcfg.distributed_world_size
        if dcfg.distributed_num_procs and dcfg.distributed_num_procs > 0:
            procs = min(procs, dcfg.distributed_num_procs)
        torch.multiprocessing.spawn(fn=du.distributed_main, args=(main, cfg, kwargs), nprocs=procs, join=True)

    class CPUAwareDDP(torch.nn.parallel.DistributedDataParallel):
        def __init__(self, module, device_ids=None, output_device=None, **kwargs):
            if next(module.parameters()).device.type == "cpu":
                device_ids = output_device = None
            super().__init__(module, device_ids=device_ids, output_device=output_device, **kwargs)

    for fixed, original in ((infer_single_node_init, single_node), (infer_torch_distributed_launch_init, torch_launch),
                            (infer_init_method, infer), (cpu_call_main, call_main)):
        fixed.__wrapped__ = original
    du._infer_single_node_init = infer_single_node_init
    du._infer_torch_distributed_launch_init = infer_torch_distributed_launch_init
    du.infer_init_method = infer_init_method
    du.call_main = cpu_call_main
    dfm.DistributedDataParallel = CPUAwareDDP
