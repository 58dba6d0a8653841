"""Harness-side fixes that let DeepSpeed, accelerate/transformers and Lightning train on CPU ranks over gloo.

Nothing here edits a library: each shim wraps or replaces one name at run time, in the process that imports this
module, and only where the stack would otherwise refuse to run on a machine without GPUs. Use:

    import shims
    shims.apply()              # before `import deepspeed` (DeepSpeed binds some torch.distributed functions at init)
    shims.apply(hf=True)       # also accelerate's PartialState and transformers' bf16 check, for HF Trainer runs
    Strategy = shims.cpu_deepspeed_strategy()   # Lightning's DeepSpeedStrategy, on CPU ranks

Each shim says why it exists. All are idempotent.
"""
import functools
import inspect
import os

import torch
import torch.distributed as dist

_16BIT = (torch.bfloat16, torch.float16)

# Collectives whose 16-bit tensors are sent as fp32, with the arguments that receive results. These are the ones
# DeepSpeed's comm layer (deepspeed/comm/torch.py) forwards to torch.distributed for the ZeRO optimizers, the engine
# and the checkpoint code; point-to-point send/recv (pipeline parallelism) is left alone.
_COLLECTIVE_OUTPUTS = {
    "all_reduce": ("tensor",),
    "reduce": ("tensor",),
    "broadcast": ("tensor",),
    "all_gather": ("tensor_list",),
    "all_gather_into_tensor": ("output_tensor",),
    "_all_gather_base": ("output_tensor",),
    "reduce_scatter": ("output",),
    "reduce_scatter_tensor": ("output",),
    "_reduce_scatter_base": ("output",),
    "gather": ("gather_list",),
    "scatter": ("tensor",),
    "all_to_all_single": ("output",),
    "all_to_all": ("output_tensor_list",),
}


def _completed_work():
    """A torch Work that is already complete (what an async 16-bit collective returns: it ran synchronously)."""
    fut = torch.futures.Future()
    fut.set_result(None)
    return torch._C._distributed_c10d._create_work_from_future(fut)


def _has_16bit(value):
    if isinstance(value, torch.Tensor):
        return value.dtype in _16BIT
    if isinstance(value, (list, tuple)):
        return any(isinstance(t, torch.Tensor) and t.dtype in _16BIT for t in value)
    return False


def _is_gloo(group):
    try:
        return dist.get_backend(group) == "gloo"
    except Exception:  # not initialised, or not a member: let the real function say so
        return False


def _wrap_collective(name, orig):
    sig = inspect.signature(orig)
    outputs = _COLLECTIVE_OUTPUTS[name]

    @functools.wraps(orig)
    def collective(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        arguments = bound.arguments
        if not any(_has_16bit(v) for v in arguments.values()) or not _is_gloo(arguments.get("group")):
            return orig(*args, **kwargs)
        copies = []  # (16-bit tensor that receives a result, its fp32 stand-in)

        def widen(value, is_output):
            if isinstance(value, torch.Tensor) and value.dtype in _16BIT:
                wide = value.detach().float()
                if is_output:
                    copies.append((value, wide))
                return wide
            if isinstance(value, (list, tuple)) and _has_16bit(value):
                return type(value)(widen(t, is_output) for t in value)
            return value

        with torch.no_grad():
            for key in list(arguments):
                arguments[key] = widen(arguments[key], key in outputs)
            async_op = bool(arguments.get("async_op", False))
            if "async_op" in sig.parameters:
                arguments["async_op"] = False
            work = orig(*bound.args, **bound.kwargs)
            for narrow, wide in copies:
                narrow.copy_(wide)
        return _completed_work() if async_op else work

    collective._ucfs_shim = True
    return collective


def gloo_16bit_collectives():
    """gloo rejects bf16 and fp16 tensors in collectives ("RuntimeError: Invalid scalar type"); fp32 works.

    Wraps the collectives above (in torch.distributed and torch.distributed.distributed_c10d) so that, on a gloo
    group, 16-bit tensors travel as fp32 copies and the results are cast back into the caller's tensors. Tensors of
    other dtypes and other backends go straight through.

    Exactness: bf16/fp16 -> fp32 is exact, so gathers, broadcasts, scatters and all-to-all move the same bits (NaN
    payloads aside). A SUM is accumulated in fp32 and rounded to 16 bits once; for two ranks that is exactly the
    16-bit addition a real bf16/fp16 all_reduce performs (fp32 carries more than 2p+2 bits for p = 8 or 11, so
    rounding twice equals rounding once); for more ranks it is one of the summation orders a real reduction may use,
    with fewer roundings. MAX/MIN/PRODUCT behave alike; overflow still ends in inf when cast back.

    An async_op=True call runs synchronously and returns an already-completed Work; on gloo/CPU this loses only the
    overlap. Call this before deepspeed.init_distributed: DeepSpeed's TorchBackend keeps references to some of these
    functions from its constructor on.
    """
    for module in (dist, dist.distributed_c10d):
        for name in _COLLECTIVE_OUTPUTS:
            orig = getattr(module, name, None)
            if orig is None or getattr(orig, "_ucfs_shim", False):
                continue
            setattr(module, name, _wrap_collective(name, orig))


def deepspeed_no_shm_comm():
    """DeepSpeed's CPU accelerator JIT-builds its shared-memory all-reduce op (deepspeed_shm_comm) when the comm
    backend starts; the root has no C++ toolchain, and the ranks should talk over gloo anyway. Marking the op
    incompatible makes deepspeed.comm skip it (build_shm_op returns None)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


def deepspeed_fp16_on_cpu():
    """DeepSpeed's CPU accelerator reports fp16 as supported only where oneDNN says the CPU has native fp16
    instructions (torch.ops.mkldnn._is_mkldnn_fp16_supported(): AVX512-FP16 or AMX-FP16); elsewhere the engine
    refuses "fp16": {"enabled": true} and Muon's Gram Newton-Schulz (ns_compute_dtype) runs in fp32 instead of fp16.
    torch computes float16 on every x86 CPU (through fp32 where no native instruction exists), so native fp16 only
    decides speed. The fixtures were made on a CPU with native fp16; without this, a resume on another CPU runs
    another optimizer than the saving run's (or none). The accelerator object is asked, so every caller sees it."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.accelerator import get_accelerator

    accel = get_accelerator()
    if getattr(accel.is_fp16_supported, "_ucfs_shim", False) or accel.device_name() != "cpu":
        return

    def is_fp16_supported():
        return True

    is_fp16_supported._ucfs_shim = True
    accel.is_fp16_supported = is_fp16_supported


def accelerate_multi_cpu():
    """accelerate's PartialState picks its backend from the GPU kind it finds; with LOCAL_RANK set and no GPU it
    finds none and runs as one process (distributed_type NO), so DeepSpeed's batch-size assertion fires
    (train_batch_size != micro * GAS * world). Where it would return (None, NO) with WORLD_SIZE > 1, this makes it
    return ("gloo", MULTI_CPU), which keeps the DeepSpeed path (accelerate's cpu=True would turn DeepSpeed off)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    orig = PartialState._prepare_backend
    if getattr(orig, "_ucfs_shim", False):
        return

    @functools.wraps(orig)
    def _prepare_backend(self, *args, **kwargs):
        backend, distributed_type = orig(self, *args, **kwargs)
        if backend is None and distributed_type == DistributedType.NO and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            return "gloo", DistributedType.MULTI_CPU
        return backend, distributed_type

    _prepare_backend._ucfs_shim = True
    PartialState._prepare_backend = _prepare_backend


def transformers_bf16_on_cpu():
    """transformers' TrainingArguments refuses bf16=True without a bf16-capable GPU unless use_cpu=True, and use_cpu
    turns DeepSpeed off. The CPU computes bf16 (DeepSpeed's CPU accelerator reports is_bf16_supported()), so the
    check in training_args is told so; nothing else in transformers sees the change."""
    import transformers.training_args as training_args

    training_args.is_torch_bf16_gpu_available = lambda: True


def apply(hf: bool = False):
    """The shims a DeepSpeed run needs (gloo 16-bit collectives, no shm comm op, fp16 on any CPU); with hf=True also
    accelerate's and transformers' (HF Trainer / accelerate runs)."""
    gloo_16bit_collectives()
    deepspeed_no_shm_comm()
    deepspeed_fp16_on_cpu()
    if hf:
        accelerate_multi_cpu()
        transformers_bf16_on_cpu()


@functools.cache
def cpu_deepspeed_strategy():
    """Lightning 2.6's DeepSpeedStrategy, made to train on CPU ranks with DeepSpeed's CPU accelerator.

    Lightning refuses three times: setup_environment raises unless the accelerator is CUDA; setup_distributed rejects
    device lists whose index is None (CPU devices); and deepspeed.initialize gets device_rank=root_device.index,
    None on CPU, which DeepSpeed asserts to be >= 0. The subclass skips the first two checks (keeping the rest of
    each method) and passes the local rank as device_rank.
    """
    import argparse
    import contextlib

    import deepspeed
    from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy
    from lightning.fabric.utilities.seed import reset_seed

    class CPUDeepSpeedStrategy(DeepSpeedStrategy):
        strategy_name = "deepspeed_cpu"

        def setup_environment(self) -> None:
            DDPStrategy.setup_environment(self)  # DeepSpeedStrategy's, less the CUDA check

        def setup_distributed(self) -> None:
            reset_seed()  # DeepSpeedStrategy's, less _validate_device_index_selection
            self.set_world_ranks()
            self._init_deepspeed_distributed()

        @contextlib.contextmanager
        def _device_rank(self):
            orig = deepspeed.initialize
            local_rank = self.local_rank

            def initialize(*args, **kwargs):
                ns = kwargs.get("args")
                if isinstance(ns, argparse.Namespace) and getattr(ns, "device_rank", 0) is None:
                    ns.device_rank = local_rank
                return orig(*args, **kwargs)

            deepspeed.initialize = initialize
            try:
                yield
            finally:
                deepspeed.initialize = orig

        def _setup_model_and_optimizer(self, *args, **kwargs):
            with self._device_rank():
                return super()._setup_model_and_optimizer(*args, **kwargs)

        def _initialize_deepspeed_inference(self, *args, **kwargs):
            with self._device_rank():
                return super()._initialize_deepspeed_inference(*args, **kwargs)

    return CPUDeepSpeedStrategy
