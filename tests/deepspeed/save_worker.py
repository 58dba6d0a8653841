#!/usr/bin/env python3
"""One rank of the MODE=save check of run_load_checks.sh: load a checkpoint natively, save it straight back.

Started at N ranks by the oracle's launch.py (env RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*):

  /usr/bin/python3 $ORACLE_DIR/launch.py N LOGDIR --worker /abs/path/save_worker.py -- \
      --fixture FIXTURE_DIR --ckpt CKPT_DIR --tag TAG --out OUT_DIR [--load-tag TAG]

It builds the fixture's model, optimizer and ds_config exactly as the oracle's lc_worker.py (lc_worker12.py for
ZeRO stages 1 and 2) does in native mode
(same model registry, same seed offset, same gloo shim and CPU fp16 patch, the spec from harness_spec.load_spec,
i.e. what load_check.py hands to lc_worker.py), calls a plain engine.load_checkpoint(CKPT_DIR) (reads
CKPT_DIR/latest), and then, without any training step, engine.save_checkpoint(CKPT_DIR, tag=TAG): DeepSpeed
writes CKPT_DIR/TAG/ (every rank its own zero_pp_rank_{r}_* files; at stages 1 and 2 rank 0 also
mp_rank_00_model_states.pt) and rewrites CKPT_DIR/latest.

OUT_DIR/rank{r}.json   what this rank loaded and saved (load path, global steps, the files it saw afterwards)
OUT_DIR/rank{r}.err    JSON {rank, stage, type, message, traceback} if something raised on that rank (exit 3)

The oracle modules are imported from $ORACLE_DIR (default: shared/oracle beside the repository).
"""
import argparse
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE_DIR = os.environ.get("ORACLE_DIR") or os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared",
                                                                            "oracle"))
sys.path.insert(0, ORACLE_DIR)
import harness_spec  # noqa: E402
import oracle_common as oc  # noqa: E402
import oracle_models as om  # noqa: E402

import torch  # noqa: E402

oc.install_gloo_shim()  # before DeepSpeed caches the collectives

import deepspeed  # noqa: E402
import deepspeed.comm as dsdist  # noqa: E402
import deepspeed.ops  # noqa: E402

deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
om.patch_cpu_fp16()

import lc_universal_loaders  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--fixture", help="fixture dir (its ORACLE.json, through harness_spec.load_spec)")
    src.add_argument("--spec", help="a spec JSON as load_check.py writes it (harness_spec.load_spec output)")
    ap.add_argument("--ckpt", required=True, help="load from here (CKPT/latest), then save into it")
    ap.add_argument("--tag", required=True, help="the tag to save under")
    ap.add_argument("--load-tag", help="load this tag instead of the one CKPT/latest names")
    ap.add_argument("--out", required=True, help="result files (never inside CKPT)")
    args = ap.parse_args()
    if args.fixture:
        spec = harness_spec.load_spec(args.fixture)
    else:
        with open(args.spec) as f:
            spec = json.load(f)
    ms = om.get(spec["model"])
    os.makedirs(args.out, exist_ok=True)

    deepspeed.init_distributed(dist_backend="gloo")
    rank = dsdist.get_rank()
    N = dsdist.get_world_size()
    stage = "setup"

    def fail(e):
        with open(os.path.join(args.out, f"rank{rank}.err"), "w") as f:
            json.dump({"rank": rank, "stage": stage, "type": type(e).__name__, "message": str(e),
                       "traceback": traceback.format_exc()}, f, indent=1)
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)

    try:
        # as lc_worker.py --mode native: everything (trainable, frozen, buffers) from another seed, so that all
        # of it has to come from the checkpoint
        model = ms.build(om.SEED + 777)
        if spec.get("zero_stage", 3) < 3:
            # as lc_worker12.py --mode native (the stage-1/2 load check)
            opt = ms.optimizer(model, drop_all_frozen_groups=True)
            cfg = ms.ds_config(N, spec["dtype"], load_universal=False, stage=spec["zero_stage"],
                               grad_accum_fp32=bool(spec.get("grad_accum_fp32")))
        else:
            opt = ms.optimizer(model)
            cfg = ms.ds_config(N, spec["dtype"], load_universal=False)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
        engine.optimizer.lc_param_names = engine.param_names
        lc_universal_loaders.install("stock")  # native: DeepSpeed's own loader, untouched

        stage = "load_checkpoint"
        load_path, _client = engine.load_checkpoint(args.ckpt, tag=args.load_tag)
        if load_path is None:
            raise RuntimeError("engine.load_checkpoint returned (None, None): no checkpoint found/loaded")
        loaded = {"load_path": load_path, "global_steps": engine.global_steps,
                  "global_samples": engine.global_samples, "skipped_steps": engine.skipped_steps}
        print(f"rank {rank}/{N}: loaded {load_path} (global_steps {engine.global_steps})", flush=True)

        stage = "save_checkpoint"  # immediately: no forward, backward or step in between
        ok = engine.save_checkpoint(args.ckpt, tag=args.tag)
        if ok is not True:
            raise RuntimeError(f"engine.save_checkpoint returned {ok!r}")
        print(f"rank {rank}/{N}: saved tag {args.tag} into {args.ckpt}", flush=True)

        stage = "after_save"
        tag_dir = os.path.join(args.ckpt, args.tag)
        with open(os.path.join(args.ckpt, "latest")) as f:
            latest = f.read()
        res = dict(loaded, rank=rank, world_size=N, saved_tag=args.tag, latest_after_save=latest,
                   tag_dir_listing=sorted(os.listdir(tag_dir)),
                   ckpt_listing=sorted(os.listdir(args.ckpt)))
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            json.dump(res, f, indent=1)
        dsdist.barrier()
    except BaseException as e:  # noqa: B902
        fail(e)


if __name__ == "__main__":
    main()
