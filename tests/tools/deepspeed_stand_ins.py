"""Stand-ins for the DeepSpeed classes its checkpoints pickle.

DeepSpeed's files name `deepspeed.runtime.zero.config.ZeroStageEnum`,
`deepspeed.runtime.fp16.loss_scaler.LossScaler` (and `DynamicLossScaler` in
fp16 runs) and, at ZeRO stages 1 and 2,
`deepspeed.utils.tensor_fragment.fragment_address`. Without DeepSpeed
installed, torch.load cannot resolve them; these classes have the same
module, name and pickled form, so files can be loaded (tests) and written
(bench/make_checkpoint.py) as DeepSpeed would.
"""
import dataclasses
import enum
import sys
import types


def install():
    """Registers the stand-in modules; returns (ZeroStageEnum, LossScaler)."""
    if "deepspeed.runtime.zero.config" in sys.modules:
        m = sys.modules
        return m["deepspeed.runtime.zero.config"].ZeroStageEnum, m["deepspeed.runtime.fp16.loss_scaler"].LossScaler

    def module(name):
        mod = types.ModuleType(name)
        sys.modules[name] = mod
        return mod

    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.zero", "deepspeed.runtime.fp16",
                 "deepspeed.utils"):
        module(name)
    config = module("deepspeed.runtime.zero.config")
    scaler = module("deepspeed.runtime.fp16.loss_scaler")
    fragment = module("deepspeed.utils.tensor_fragment")

    class ZeroStageEnum(int, enum.Enum):
        disabled = 0
        optimizer_states = 1
        gradients = 2
        weights = 3
        max_stage = 3

    class LossScaler:
        def __init__(self, scale=1):
            self.cur_scale = scale
            self.dynamic = False

    class DynamicLossScaler(LossScaler):
        pass

    @dataclasses.dataclass
    class fragment_address:  # noqa: N801 - DeepSpeed's name
        numel: int
        start: int

    ZeroStageEnum.__module__, ZeroStageEnum.__qualname__ = config.__name__, "ZeroStageEnum"
    LossScaler.__module__, LossScaler.__qualname__ = scaler.__name__, "LossScaler"
    DynamicLossScaler.__module__, DynamicLossScaler.__qualname__ = scaler.__name__, "DynamicLossScaler"
    fragment_address.__module__, fragment_address.__qualname__ = fragment.__name__, "fragment_address"
    config.ZeroStageEnum = ZeroStageEnum
    scaler.LossScaler = LossScaler
    scaler.DynamicLossScaler = DynamicLossScaler
    fragment.fragment_address = fragment_address
    return ZeroStageEnum, LossScaler
