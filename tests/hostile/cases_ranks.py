"""Hostile rank sets (stray, missing, swapped ranks, mixed world sizes and dtypes, files of another
checkpoint) and pickles of the wrong structure.

Registered with corpus_support.case; make_hostile_corpus.py writes them.
"""

import math
import os
import shutil

from corpus_support import (
    MODEL, OPTIM, TAG, TRICKY, case, dict_del, dict_set, edit, flat, load, model, optim, osd, pt,
    raw_pickle, read, shapes, write)


# ------------------------------------------------------------------ rank sets

@case("ranks", "rank_999999999_empty", "one empty file named zero_pp_rank_999999999_..._optim_states.pt")
def _(tag, root):
    write(optim(tag, 999999999), b"")


@case("ranks", "rank_999999999_model", "one empty model file of rank 999999999")
def _(tag, root):
    write(model(tag, 999999999), b"")


@case("ranks", "rank_1000_copy", "rank 1's file copied as rank 1000")
def _(tag, root):
    shutil.copy(optim(tag, 1), optim(tag, 1000))


@case("ranks", "rank_10_copy", "rank 1's file copied as rank 10")
def _(tag, root):
    shutil.copy(optim(tag, 1), optim(tag, 10))


@case("ranks", "missing_rank_0", "rank 0's optimizer file missing")
def _(tag, root):
    os.remove(optim(tag, 0))


@case("ranks", "missing_model_0", "rank 0's model states missing")
def _(tag, root):
    os.remove(model(tag, 0))


@case("ranks", "missing_middle", "rank 1 of 4 missing", "z3_fp32_ws4")
def _(tag, root):
    os.remove(optim(tag, 1))


@case("ranks", "swapped_optim", "rank 0 and 1 optimizer files swapped")
def _(tag, root):
    a, b = read(optim(tag, 0)), read(optim(tag, 1))
    write(optim(tag, 0), b)
    write(optim(tag, 1), a)


@case("ranks", "swapped_model", "rank 0 and 1 model files swapped")
def _(tag, root):
    a, b = read(model(tag, 0)), read(model(tag, 1))
    write(model(tag, 0), b)
    write(model(tag, 1), a)


@case("ranks", "model_as_optim", "rank 1's model states named as its optimizer file")
def _(tag, root):
    shutil.copy(model(tag, 1), optim(tag, 1))


@case("ranks", "renamed_rank_3_of_4", "ranks 2 and 3 of 4 rotated", "z3_fp32_ws4")
def _(tag, root):
    a, b, c = read(optim(tag, 1)), read(optim(tag, 2)), read(optim(tag, 3))
    write(optim(tag, 1), b)
    write(optim(tag, 2), c)
    write(optim(tag, 3), a)


@case("ranks", "mixed_bf16_plain", "bf16_ and plain optimizer files together")
def _(tag, root):
    shutil.copy(optim(tag, 1), os.path.join(tag, "bf16_" + OPTIM.format(1)))


@case("ranks", "mp_rank_01", "a model-parallel rank 1 file")
def _(tag, root):
    shutil.copy(optim(tag, 1), os.path.join(tag, "zero_pp_rank_1_mp_rank_01_optim_states.pt"))


@case("ranks", "leading_zero_duplicate", "zero_pp_rank_01 beside zero_pp_rank_1")
def _(tag, root):
    shutil.copy(optim(tag, 1), os.path.join(tag, "zero_pp_rank_01_mp_rank_00_optim_states.pt"))


def foreign(fixture, rank, kind="optim"):
    def fn(tag, root, fixtures):
        name = (OPTIM if kind == "optim" else MODEL).format(rank)
        bf16 = "bf16_" if "bf16" in fixture and kind == "optim" else ""
        src = os.path.join(fixtures, fixture, "checkpoint", TAG, bf16 + name)
        shutil.copy(src, os.path.join(tag, name))
    fn.needs_fixtures = True
    return fn


case("ranks", "mixed_world_ws3_rank1", "rank 1's optimizer file from the world-size-3 run")(foreign("z3_fp32_ws3", 1))
case("ranks", "mixed_world_ws4_model1", "rank 1's model file from the world-size-4 run")(foreign("z3_fp32_ws4", 1, "model"))
case("ranks", "mixed_world_ws3_rank2", "rank 2's file of the world-size-3 run added")(foreign("z3_fp32_ws3", 2))
case("ranks", "mixed_dtype_bf16_rank1", "rank 1's optimizer file from the bf16 run (plain name)")(foreign("z3_bf16_ws2", 1))
case("ranks", "mixed_tricky_rank1", "rank 1's optimizer file from the tricky run")(foreign(TRICKY, 1))
case("ranks", "mixed_tricky_model0", "rank 0's model states from the tricky run")(foreign(TRICKY, 0, "model"))


def pickle_int(fn_path, key, value, where="osd"):
    def fn(tag, root):
        def e(tree, _):
            d = osd(tree) if where == "osd" else tree
            dict_set(d, key, value)
        edit(fn_path(tag), e)
    return fn


for _v in (2 ** 31, 2 ** 63 - 1, -1, 0, 3, 1000000):
    case("ranks", f"partition_count_{_v}", f"rank 1's partition_count {_v}")(
        pickle_int(lambda t: optim(t, 1), "partition_count", _v))
    case("ranks", f"dp_world_size_{_v}", f"rank 0's dp_world_size {_v}")(
        pickle_int(lambda t: model(t), "dp_world_size", _v, "root"))


@case("ranks", "all_partition_count_2_pow_31", "every file claims a world of 2^31")
def _(tag, root):
    for r in range(2):
        edit(optim(tag, r), lambda t, _: dict_set(osd(t), "partition_count", 2 ** 31))
        edit(model(tag, r), lambda t, _: dict_set(t, "dp_world_size", 2 ** 31))


# ------------------------------------------------------------------ structure

STRUCT = {
    "no_optimizer_state_dict": (optim, lambda t: dict_del(t, "optimizer_state_dict")),
    "zero_stage_2": (optim, lambda t: dict_set(osd(t), "zero_stage", 2)),
    "zero_stage_huge": (optim, lambda t: dict_set(osd(t), "zero_stage", 2 ** 63 - 1)),
    "zero_stage_string": (optim, lambda t: dict_set(osd(t), "zero_stage", pt.Str("3"))),
    "flat_groups_empty": (optim, lambda t: dict_set(osd(t), "fp32_flat_groups", pt.Lst([]))),
    "flat_groups_not_list": (optim, lambda t: dict_set(osd(t), "fp32_flat_groups", 5)),
    "flat_groups_none_item": (optim, lambda t: osd(t).get("fp32_flat_groups").items.__setitem__(0, None)),
    "flat_groups_1000": (optim, lambda t: dict_set(osd(t), "fp32_flat_groups", pt.Lst([flat(t)] * 1000))),
    "state_missing": (optim, lambda t: dict_del(osd(t).get("optimizer_state_dict"), "state")),
    "exp_avg_missing": (optim, lambda t: dict_del(osd(t).get("optimizer_state_dict").get("state").items[0][1], "exp_avg")),
    "exp_avg_is_flat_of_rank": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "exp_avg_sq", flat(t))),
    "step_nan": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", float("nan"))),
    "step_huge": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", 2 ** 63 - 1)),
    "step_long": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", 2 ** 70)),
    "step_string": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict").get("state").items[0][1], "step", pt.Str("4"))),
    "state_key_huge": (optim, lambda t: osd(t).get("optimizer_state_dict").get("state").items[0].__setitem__(0, 2 ** 62)),
    "state_10000_entries": (optim, lambda t: osd(t).get("optimizer_state_dict").get("state").items[0][1].items.extend(
        [[pt.Str(f"s{i}"), flat(t)] for i in range(10000)])),
    "param_groups_out_of_range": (optim, lambda t: osd(t).get("optimizer_state_dict").get("param_groups").items[0].get("params").items.__setitem__(0, 2 ** 40)),
    "param_groups_negative": (optim, lambda t: osd(t).get("optimizer_state_dict").get("param_groups").items[0].get("params").items.__setitem__(0, -1)),
    "param_groups_twice": (optim, lambda t: osd(t).get("optimizer_state_dict").get("param_groups").items.append(
        osd(t).get("optimizer_state_dict").get("param_groups").items[0])),
    "param_groups_not_list": (optim, lambda t: dict_set(osd(t).get("optimizer_state_dict"), "param_groups", 7)),
    "param_shapes_missing": (model, lambda t: dict_del(t, "param_shapes")),
    "param_shapes_empty": (model, lambda t: dict_set(t, "param_shapes", pt.Lst([]))),
    "param_shapes_1000_groups": (model, lambda t: dict_set(t, "param_shapes", pt.Lst([shapes(t)] * 1000))),
    "module_missing": (model, lambda t: dict_del(t, "module")),
    "module_not_dict": (model, lambda t: dict_set(t, "module", pt.Lst([]))),
    "buffer_names_missing_buffer": (model, lambda t: dict_set(t, "buffer_names", pt.Lst([pt.Str("no.such.buffer")]))),
    "buffer_names_not_strings": (model, lambda t: dict_set(t, "buffer_names", pt.Lst([5, None]))),
    "shared_params_to_missing": (model, lambda t: dict_set(t, "shared_params", pt.Dct([[pt.Str("alias"), pt.Str("no.such")]]))),
    "shared_params_self": (model, lambda t: dict_set(t, "shared_params", pt.Dct([[pt.Str(shapes(t).dictitems[0][0].v), pt.Str(shapes(t).dictitems[0][0].v)]]))),
    "frozen_shapes_without_fragments": (model, lambda t: dict_set(t, "frozen_param_shapes", pt.Dct([[pt.Str("frozen.w"), shapes(t).dictitems[0][1]]]))),
    "sub_group_size_negative": (model, lambda t: dict_set(t, "ds_config", pt.Dct([[pt.Str("zero_optimization"), pt.Dct([[pt.Str("sub_group_size"), -5]])]]))),
    "sub_group_size_inf": (model, lambda t: dict_set(t, "ds_config", pt.Dct([[pt.Str("zero_optimization"), pt.Dct([[pt.Str("sub_group_size"), math.inf]])]]))),
    "sub_group_size_nan": (model, lambda t: dict_set(t, "ds_config", pt.Dct([[pt.Str("zero_optimization"), pt.Dct([[pt.Str("sub_group_size"), math.nan]])]]))),
    "sub_group_size_zero": (model, lambda t: dict_set(t, "ds_config", pt.Dct([[pt.Str("zero_optimization"), pt.Dct([[pt.Str("sub_group_size"), 0]])]]))),
    "ds_config_not_dict": (model, lambda t: dict_set(t, "ds_config", pt.Str("{}"))),
    "ds_version_control": (model, lambda t: dict_set(t, "ds_version", pt.Str("0.14.5\x1b[2J\x00"))),
    "ds_version_huge": (model, lambda t: dict_set(t, "ds_version", pt.Str("9" * 100000))),
    "global_steps_negative": (model, lambda t: dict_set(t, "global_steps", -(2 ** 63))),
    "top_level_list": (model, None),
}
for _key, (_which, _fn) in STRUCT.items():
    def _make(which, fn):
        def apply(tag, root):
            if fn is None:
                edit(which(tag), lambda t, r: None)
                p = which(tag)
                _, records, top = load(p)
                raw_pickle(p, pt.Pickler().dumps(pt.Lst([1, 2])))
                return
            edit(which(tag), lambda t, _: fn(t))
        return apply
    case("structure", _key, f"{_which.__name__} file: {_key}")(_make(_which, _fn))
