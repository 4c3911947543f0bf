"""switchml: a torch.distributed backend that sums gradients in the network.

Importing it registers the backend "switchml":

    import switchml
    import torch.distributed as dist
    dist.init_process_group("switchml", rank=r, world_size=n, init_method="tcp://host:29500")

SWITCHML_CONTROLLER=host:port selects a running controller; without it,
rank 0 runs a software switch and controller inside its process, on
loopback, which serves a job of processes on one host.

The backend implements all_reduce and reduce_scatter (also
reduce_scatter_tensor; SUM, and AVG for floats), broadcast, all_gather
(also all_gather_into_tensor) and barrier on contiguous CPU tensors, on
torch 1.13 and 2.x; the reductions take the dtypes the library sums,
asked by name (float32, float16, bfloat16 and int32 among them), the
others any dtype. Other collectives raise NotImplementedError.
Session and LocalSwitch expose the library without torch.
"""
import inspect

from ._lib import (ConfigError, ControllerUnreachable, JobAborted, JobMismatch, LocalSwitch, Session,
                   SwitchMLError, SwitchMLTimeout, library_path)

__all__ = ["BACKEND", "Session", "LocalSwitch", "SwitchMLError", "ConfigError",
           "ControllerUnreachable", "JobMismatch", "SwitchMLTimeout", "JobAborted", "library_path"]

BACKEND = "switchml"

try:
    import torch.distributed as _dist
except ImportError:  # the library alone, without torch
    _dist = None

if _dist is not None and _dist.is_available():
    from ._pg import ProcessGroupSwitchML, create as _create

    __all__.append("ProcessGroupSwitchML")

    def _register():
        # torch 2.x asks which devices a backend serves (and warns when it
        # is not told); 1.13's register_backend has no such argument.
        try:
            params = inspect.signature(_dist.Backend.register_backend).parameters
        except (TypeError, ValueError):
            params = {}
        kwargs = {"devices": ["cpu"]} if "devices" in params else {}
        _dist.Backend.register_backend(BACKEND, _create, **kwargs)

    if not hasattr(_dist.Backend, BACKEND.upper()):
        _register()
