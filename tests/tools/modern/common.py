"""Helpers shared by the rank programs of make_modern_fixtures.py (they run inside the modern root, one per rank).

Tensor records: every tensor a rank program reports is written as
    {"dtype": "float32", "shape": [..], "sha256": <sha256 of the tensor's bytes, C order, little endian: what
     torch.save writes for a contiguous tensor>, "b64": <base64 of those bytes> (only when values are wanted)}
so a test can compare values bit for bit without DeepSpeed (decode b64 as the dtype's little-endian array).
"""
import argparse
import base64
import hashlib
import json
import os

import torch


def watchdog(seconds=300):
    """A hung collective prints every thread's stack and ends the rank (launch.py then stops the others)."""
    import faulthandler
    faulthandler.dump_traceback_later(seconds, exit=True)


def start(watchdog_seconds):
    """What every rank program does first: reads `--spec SPEC.json --phase train|resume`, arms the watchdog (the
    spec's "watchdog" seconds, else the program's own default) and returns (phase, spec, rank, world)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--phase", choices=("train", "resume"), required=True)
    a = ap.parse_args()
    spec = json.load(open(a.spec))
    watchdog(spec.get("watchdog", watchdog_seconds))
    return a.phase, spec, rank(), world()


def tensor_bytes(t):
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def trec(t, values=True):
    if t is None:
        return None
    b = tensor_bytes(t)
    rec = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
           "sha256": hashlib.sha256(b).hexdigest()}
    if values:
        rec["b64"] = base64.b64encode(b).decode()
    return rec


def rank():
    return int(os.environ.get("RANK", "0"))


def world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def class_name(obj):
    """module.qualname of obj's class: which optimizer (or wrapper) a library chose, as the fixtures record it."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def optimizer_classes(engine):
    """The DeepSpeed engine's optimizer (the ZeRO/BF16 wrapper) and the torch optimizer it wraps, by class."""
    return {"optimizer_class": class_name(engine.optimizer),
            "basic_optimizer_class": class_name(engine.basic_optimizer)}


def param_shape(p):
    s = getattr(p, "ds_shape", None)
    return list(s) if s is not None else list(p.shape)


def model_params(module):
    """names, shapes, dtypes, requires_grad, tied names (remove_duplicate=False finds the aliases)."""
    first = {}
    tied = {}
    params = []
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[name] = first[id(p)]
            continue
        first[id(p)] = name
        params.append({"name": name, "shape": param_shape(p), "dtype": str(p.dtype).removeprefix("torch."),
                       "requires_grad": bool(p.requires_grad)})
    buffers = []
    persistent = set(module.state_dict().keys())
    for name, b in module.named_buffers():
        buffers.append({"name": name, "shape": list(b.shape), "dtype": str(b.dtype).removeprefix("torch."),
                        "persistent": name in persistent})
    return {"params": params, "tied": tied, "buffers": buffers,
            "frozen": [p["name"] for p in params if not p["requires_grad"]],
            "trainable_numel": sum(int(torch.Size(p["shape"]).numel()) for p in params if p["requires_grad"])}


def group_names(groups, module):
    """Names of the params of each torch param group (a list of {"params": [...]} or of params), by identity,
    taken BEFORE DeepSpeed replaces the groups' params by its flat partitions."""
    names = {id(p): n for n, p in module.named_parameters()}
    if groups and not isinstance(groups[0], dict):
        groups = [{"params": list(groups)}]
    return [[names.get(id(p), f"<unnamed {tuple(p.shape)}>") for p in g["params"]] for g in groups]


def param_groups(optimizer, names=None):
    """The basic optimizer's param groups: hyper-parameters, and the param names given (DeepSpeed has replaced the
    groups' params by flat fp32 partitions by now; `names` = group_names(...) from before)."""
    out = []
    for i, g in enumerate(optimizer.param_groups):
        hp = {}
        for k, v in g.items():
            if k == "params":
                continue
            if isinstance(v, torch.Tensor):
                v = v.tolist()
            if isinstance(v, tuple):
                v = list(v)
            if isinstance(v, (int, float, str, bool, list, type(None))):
                hp[k] = v
            else:
                hp[k] = repr(v)
        ent = {"params": names[i] if names is not None and i < len(names) else None,
               "flat_params_numel": [int(p.numel()) for p in g["params"]], **hp}
        out.append(ent)
    return out


def _full_hp(p, key, opt):
    """(full fp32 tensor or None, error or None) of param p: its fp32 master (key None) or optimizer state `key`.

    Like deepspeed.utils.safe_get_full_fp32_param / safe_get_full_optimizer_state, but every rank makes the same
    collective calls whatever happens locally (those APIs raise on the ranks that hold a fragment when the key is
    not the param's, e.g. Adam keys of a Muon group, and then the ranks' collectives no longer match)."""
    import torch.distributed as dist
    err = None
    if hasattr(p, "ds_id"):  # ZeRO-3: every rank holds a partition of every param, so failures are symmetric
        try:
            return p._z3_optimizer.get_full_hp_param(p, key), None
        except Exception as e:  # noqa: BLE001
            return None, f"{type(e).__name__}: {e}"[:300]
    numel = p.numel()
    buf = torch.zeros(numel, dtype=torch.float32)
    ok = torch.ones(1, dtype=torch.int32)
    m = getattr(p, "_hp_mapping", None)
    whole = None  # the whole param's state, when this rank's state covers whole params (Muon momentum_buffer)
    frag = None
    if m is not None:
        try:
            if key is None:
                frag = m.get_hp_fragment(None)
            else:
                # Not m.get_hp_fragment(key): DeepSpeed 0.19.8 links the optimizer-state fragments once, right
                # after the FIRST param group's optimizer step (_optimizer_step -> _lazy_init_hp_params_optimizer_
                # state), when the later groups have no state yet; their params then never get fragments
                # ("exp_avg not found in optimizer state fragment"). Read the flat state directly instead.
                flats = getattr(opt, "single_partition_of_fp32_groups", None) or \
                    getattr(opt, "fp32_groups_flat_partition")
                flat = flats[m.param_group_index]
                st = getattr(opt, "optimizer", opt).state[flat][key]
                touched = list(getattr(opt, "params_in_partition", [[]] * (m.param_group_index + 1))[
                    m.param_group_index])
                sizes = [q.numel() for q in touched]
                if st.shape == flat.shape:
                    ha = m.hp_fragment_address
                    frag = st.narrow(0, ha.start, ha.numel)
                elif st.dim() == 1 and st.numel() == sum(sizes) and any(q is p for q in touched):
                    # ZeRO-1/2 Muon momentum_buffer: the WHOLE params this rank's partition touches, concatenated
                    # in params_in_partition order (stage_1_and_2.py get_flat_partition: buffer_idx +=
                    # tensor.numel()); every rank that touches a param holds all of it
                    i = next(j for j, q in enumerate(touched) if q is p)
                    whole = st.narrow(0, sum(sizes[:i]), numel)
                else:
                    raise ValueError(f"{key} has shape {list(st.shape)}, neither the flat partition's "
                                     f"{list(flat.shape)} nor the touched params' [{sum(sizes)}]")
            if whole is None:
                a = m.lp_fragment_address
                buf.narrow(0, a.start, a.numel).copy_(frag.detach().float().reshape(-1))
        except Exception as e:  # noqa: BLE001
            ok.zero_()
            err = f"{type(e).__name__}: {e}"[:300]
    group = getattr(p, "_dp_group", None)
    # the lowest rank holding a whole-param state gives it alone (the others' copies are replicas)
    nranks = dist.get_world_size(group=group)
    me = dist.get_rank(group=group)
    holder = torch.tensor([me if whole is not None else nranks], dtype=torch.int64)
    dist.all_reduce(holder, op=dist.ReduceOp.MIN, group=group)
    if whole is not None and int(holder) == me:
        buf.copy_(whole.detach().float().reshape(-1))
    dist.all_reduce(buf, group=group)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
    if not int(ok):
        return None, err or "failed on another rank"
    return buf, None


def live_state(engine, values=True, module=None):
    """Every trainable param's full fp32 master and full optimizer state, as the live engine holds them.

    Collective at every stage (all ranks must call, in the same order). An optimizer key the param has no state
    for is left out (and the first error per key is reported)."""
    module = module if module is not None else engine.module
    opt = engine.optimizer
    base = getattr(opt, "optimizer", opt)
    keys = set()
    for st in base.state.values():
        keys.update(k for k, v in st.items() if torch.is_tensor(v) and v.dim() > 0)
    out = {}
    errors = {}
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        shape = param_shape(p)
        v, e = _full_hp(p, None, opt)
        ent = {"fp32": trec(v.float().reshape(shape), values) if v is not None else None}
        if e:
            errors.setdefault("fp32", {})[name] = e
        for k in sorted(keys):  # every tensor state key the optimizer holds (Adam's, Muon's momentum_buffer, ...)
            v, e = _full_hp(p, k, opt)
            if v is not None:
                ent[k] = trec(v.float().reshape(shape), values)
            else:
                errors.setdefault(k, {})[name] = e
        out[name] = ent
    # DeepSpeed's own lp->hp optimizer-state links (what safe_get_full_optimizer_state reads at ZeRO-1/2): which
    # params lack a link to state their flat group has (see _full_hp); union over ranks
    unlinked = []
    flats = getattr(opt, "single_partition_of_fp32_groups", None) or getattr(opt, "fp32_groups_flat_partition", None)
    if flats is not None:
        for name, p in module.named_parameters():
            m = getattr(p, "_hp_mapping", None)
            if m is None or not p.requires_grad:
                continue
            flat = flats[m.param_group_index]
            have = {k for k, v in base.state.get(flat, {}).items() if torch.is_tensor(v) and v.shape == flat.shape}
            if have - set(m.optim_fragment or {}):
                unlinked.append(name)
        import torch.distributed as dist
        if dist.is_initialized():
            parts = [None] * dist.get_world_size()
            dist.all_gather_object(parts, unlinked)
            unlinked = sorted({n for part in parts for n in part})
    steps = sorted({float(st["step"]) for st in base.state.values() if "step" in st})
    # per basic-optimizer group: its scalar state (step, ...) and the dtype and shape of each tensor state, and of
    # the flat master partitions themselves
    # (ZeRO-3 empties the groups' params between steps: its sub-group flats map to groups by sub_group_to_group_id)
    owners = {}
    for gi, g in enumerate(base.param_groups):
        for q in g["params"]:
            owners[id(q)] = (gi, None)
    flat3, s2g = getattr(opt, "fp32_partitioned_groups_flat", None), getattr(opt, "sub_group_to_group_id", None)
    if flat3 is not None and s2g is not None:
        for si, q in enumerate(flat3):
            owners.setdefault(id(q), (s2g[si], si))
    group_state = []
    for q, st in base.state.items():
        if torch.is_tensor(q):
            gi, si = owners.get(id(q), (None, None))
            g = base.param_groups[gi] if gi is not None else {}
            group_state.append({
                "group": gi, "sub_group": si, "name": g.get("name"), "use_muon": g.get("use_muon"),
                "param": f"{str(q.dtype).removeprefix('torch.')} {list(q.shape)}",
                "scalars": {k: float(v) for k, v in st.items()
                            if (torch.is_tensor(v) and v.dim() == 0) or isinstance(v, (int, float))},
                "tensors": {k: f"{str(v.dtype).removeprefix('torch.')} {list(v.shape)}" for k, v in st.items()
                            if torch.is_tensor(v) and v.dim() > 0}})
    groups = [{k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
               for k, v in g.items() if k != "params"} for g in opt.param_groups]
    return {"params": out, "optimizer_state_keys": sorted(keys), "adam_steps": steps,
            "param_groups_hyper": groups, "group_state_rank0_view": group_state, "errors": errors or None,
            "ds_hp_optim_state_unlinked": unlinked if flats is not None else None}


def module_values(module, values=True):
    """Every param (whole, gathered under ZeRO-3; in the module's own dtype) and every buffer of the module."""
    params = [(n, p) for n, p in module.named_parameters()]
    z3 = [p for _, p in params if hasattr(p, "ds_id")]
    out = {"params": {}, "buffers": {}}
    if z3:
        import deepspeed
        with deepspeed.zero.GatheredParameters(z3):
            for n, p in params:
                out["params"][n] = trec(p.detach().clone(), values)
    else:
        for n, p in params:
            out["params"][n] = trec(p.detach(), values)
    for n, b in module.named_buffers():
        out["buffers"][n] = trec(b.detach(), values)
    return out


def losses_record(phase, world, rec, global_step):
    """The head of a trainer phase's record: its steps and their losses, the mean over ranks and per rank, from this
    rank's (step, loss) pairs `rec` (collective), and the trainer's global step at the end."""
    per_rank, mean = gather_losses([v for _, v in rec])
    return {"phase": phase, "world_size": world, "steps": [s for s, _ in rec], "losses": mean,
            "losses_per_rank": per_rank, "global_step": global_step}


def gather_losses(local):
    """[per-rank losses] for a list of local floats, and their mean over ranks (collective)."""
    import torch.distributed as dist
    t = torch.tensor(local, dtype=torch.float64)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        parts = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
    else:
        parts = [t]
    per_rank = [x.tolist() for x in parts]
    mean = torch.stack(parts).mean(0).tolist() if len(local) else []
    return per_rank, mean


def finite(obj):
    """JSON-safe copy: non-finite floats become the strings "inf", "-inf", "nan" (strict JSON has none)."""
    if isinstance(obj, float) and obj != obj:
        return "nan"
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(finite(obj), f, indent=1, default=str, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def save_and_train_on(engine, spec, recipe, losses, step, first, extra, res):
    """Every engine program's save: the checkpoint (its recipe and losses as client state), then `extra` more
    steps from batch `first` in the same process; res gains the losses before and after, the optimizer classes,
    the data types and the versions."""
    engine.save_checkpoint(spec["ckpt"], client_state={"recipe": recipe, "losses": losses})
    after = [step(s) for s in range(first, first + extra)]
    res["losses_per_rank"], res["losses"] = gather_losses(losses)
    res["losses_after_per_rank"], res["losses_after"] = gather_losses(after)
    res.update(optimizer_classes(engine))
    res["data_types"] = [str(t) for t in engine.get_data_types()]
    res["versions"] = versions()


def load_for_resume(engine, spec, res):
    """Every engine program's resume: load_checkpoint of spec's checkpoint, which must find one."""
    load_path, client = engine.load_checkpoint(spec["ckpt"])
    assert load_path is not None, "load_checkpoint found nothing"
    res["load_path"] = load_path
    res["client_state_keys"] = sorted(client)


def write_result(spec, phase, res):
    """Rank 0's record of the phase, read by the generator: SPEC.result + ".<phase>.json"."""
    if rank() == 0:
        write_json(spec["result"] + f".{phase}.json", res)


def versions():
    import importlib.metadata as md
    import platform
    out = {"python": platform.python_version()}
    for name in ("torch", "deepspeed", "transformers", "accelerate", "lightning", "peft", "safetensors", "numpy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    out["torch.__version__"] = torch.__version__
    return out
