"""switchml: a torch.distributed backend that sums gradients in the network.

Importing it registers the backend "switchml":

    import switchml
    import torch.distributed as dist
    dist.init_process_group("switchml", rank=r, world_size=n, init_method="tcp://host:29500")

SWITCHML_CONTROLLER=host:port selects a running controller; without it,
rank 0 runs a software switch and controller inside its process, on
loopback, which serves a job of processes on one host. float16 and
bfloat16 tensors travel at 16 bits a value; float32 too with
pg_options=switchml.Options(wire_bits=16) or SWITCHML_WIRE_BITS=16.

The backend is a drop-in for gloo on CPU tensors, on torch 1.13 and
2.x. The switch carries all_reduce and reduce_scatter (also
reduce_scatter_tensor; SUM, and AVG for floats) of the dtypes the
library sums (float32, float16, bfloat16 and int32), and broadcast and
all_gather (also all_gather_into_tensor) of contiguous tensors of any
dtype; every other call (other reductions and dtypes, reduce, gather,
scatter, all_to_all, send/recv, the coalesced forms, monitored_barrier,
...) goes through a gloo group the backend makes beside it, in order
with the switch's calls. ProcessGroupSwitchML.delegated() counts them.
Session and LocalSwitch expose the library without torch.
"""
import inspect

from ._lib import (ConfigError, ControllerUnreachable, JobAborted, JobMismatch, LocalSwitch, Session,
                   SwitchMLError, SwitchMLTimeout, library_path)
from ._options import Options

__all__ = ["BACKEND", "Options", "Session", "LocalSwitch", "SwitchMLError", "ConfigError",
           "ControllerUnreachable", "JobMismatch", "SwitchMLTimeout", "JobAborted", "library_path"]

BACKEND = "switchml"

try:
    import torch.distributed as _dist
except ImportError:  # the library alone, without torch
    _dist = None

if _dist is not None and _dist.is_available():
    from ._pg import ProcessGroupSwitchML, create as _create, create_extended as _create_extended

    __all__ += ["ProcessGroupSwitchML", "declare_test_features"]

    def _register():
        # torch 2.x asks which devices a backend serves (and warns when it
        # is not told); 1.13's register_backend has no such argument. The
        # extended creator (1.13 and 2.x) is handed pg_options, and on 2.x
        # the group torch made first, which carries init_process_group's
        # device_id.
        try:
            params = inspect.signature(_dist.Backend.register_backend).parameters
        except (TypeError, ValueError):
            params = {}
        kwargs = {"devices": ["cpu"]} if "devices" in params else {}
        if "extended_api" in params:
            _dist.Backend.register_backend(BACKEND, _create_extended, extended_api=True, **kwargs)
        else:
            _dist.Backend.register_backend(BACKEND, _create, **kwargs)

    if not hasattr(_dist.Backend, BACKEND.upper()):
        _register()

    def declare_test_features():
        """Tells PyTorch's distributed test harness
        (torch.testing._internal.common_distributed.DistTestCases) what
        the backend does, as a third-party backend's test driver does
        before it runs torch's tests (torch_ucc's declares "ucc" so): a
        plugin backend that runs DDP and subgroups, and every collective
        of the CPU (none skipped). Not GPUs: CPU tensors only."""
        from torch.testing._internal.common_distributed import DistTestCases

        for feature in ("ddp", "subgroup", "plugin"):
            DistTestCases.backend_feature.setdefault(feature, set()).add(BACKEND)
        for backends in DistTestCases.skip_collective.values():
            backends.discard(BACKEND)
