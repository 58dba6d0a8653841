"""Hostile cases of the other layouts: ZeRO-1/2 (one model file, flat partitions), layouts ucfs refuses by
name, tensor and pipeline parallel grids, and DeepSpeed 0.19.8's expert-parallel checkpoints.

Registered with corpus_support.case; make_hostile_corpus.py writes them.
"""

import os
import shutil

from corpus_support import (
    case, dict_del, dict_set, edit, model, optim, osd, pid_items, pt, read, shapes, write)
from cases_files import TENSORS


# ------------------------------------------------------------------ ZeRO-1/2

STAGE12 = "z2_tricky_fp32_ws2"  # two param groups split across 2 ranks, mp_rank_00_model_states.pt
SHARED_MODEL = "mp_rank_00_model_states.pt"


def partition(tree, k=0):
    return osd(tree).get("single_partition_of_fp32_groups").items[k]


def base_state(tree):
    return osd(tree).get("base_optimizer_state").get("state")


for _key, _fn in TENSORS.items():
    case("zero12_tensors", _key, f"rank 1's fp32 partition of group 0: {_key}", STAGE12)(
        lambda tag, root, fn=_fn: edit(optim(tag, 1), lambda t, recs: fn(partition(t), recs)))


@case("zero12", "partition_count_not_ints", "partition_count ['2', '2']", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: dict_set(osd(t), "partition_count", pt.Lst([pt.Str("2"), pt.Str("2")])))


@case("zero12", "partition_count_of_experts", "partition_count [2, 1]: a group over fewer ranks (MoE)", STAGE12)
def _(tag, root):
    for r in range(2):
        edit(optim(tag, r), lambda t, _: dict_set(osd(t), "partition_count", pt.Lst([2, 1])))


@case("zero12", "no_base_optimizer_state", "base_optimizer_state removed", STAGE12)
def _(tag, root):
    edit(optim(tag, 1), lambda t, _: dict_del(osd(t), "base_optimizer_state"))


@case("zero12", "state_of_one_group_missing", "base_optimizer_state['state'] lacks group 1", STAGE12)
def _(tag, root):
    edit(optim(tag, 1), lambda t, _: base_state(t).items.__delitem__(slice(1, 2)))


@case("zero12", "partition_list_longer", "single_partition_of_fp32_groups has a third group", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: osd(t).get("single_partition_of_fp32_groups").items.append(partition(t)))


@case("zero12", "partition_2d", "rank 0's fp32 partition shaped 2-d", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: partition(t).args.items.__setitem__(2, pt.Tup([208, 2])))


@case("zero12", "exp_avg_numel_2_pow_62", "exp_avg of group 0 with a storage of 2^62 elements", STAGE12)
def _(tag, root):
    edit(optim(tag), lambda t, _: pid_items(base_state(t).items[0][1].get("exp_avg")).__setitem__(4, 2 ** 62))


@case("zero12", "zero_stage_3", "zero_stage 3 beside mp_rank_00_model_states.pt", STAGE12)
def _(tag, root):
    def fn(t, _):
        dict_set(osd(t), "zero_stage", 3)
    for r in range(2):
        edit(optim(tag, r), fn)


@case("zero12", "no_zero_stage_on_one_rank", "rank 1 without zero_stage (a BF16_Optimizer file?)", STAGE12)
def _(tag, root):
    edit(optim(tag, 1), lambda t, _: dict_del(osd(t), "zero_stage"))


@case("zero12", "model_states_missing", "mp_rank_00_model_states.pt removed", STAGE12)
def _(tag, root):
    os.remove(os.path.join(tag, SHARED_MODEL))


@case("zero12", "model_states_truncated", "mp_rank_00_model_states.pt cut in half", STAGE12)
def _(tag, root):
    path = os.path.join(tag, SHARED_MODEL)
    write(path, read(path)[: os.path.getsize(path) // 2])


@case("zero12", "tensor_parallel_rank", "an mp_rank_01_model_states.pt beside mp_rank_00", STAGE12)
def _(tag, root):
    shutil.copy(os.path.join(tag, SHARED_MODEL), os.path.join(tag, "mp_rank_01_model_states.pt"))


@case("zero12", "last_rank_missing", "rank 1's optimizer file removed", STAGE12)
def _(tag, root):
    os.remove(optim(tag, 1))


@case("zero12", "dp_world_size_2_pow_31", "dp_world_size 2^31 in the model states", STAGE12)
def _(tag, root):
    edit(os.path.join(tag, SHARED_MODEL), lambda t, _: dict_set(t, "dp_world_size", 2 ** 31))


@case("zero12", "group_shape_wraps", "a param of shape [3, 6148914691236517207] in group 1", STAGE12)
def _(tag, root):
    def fn(t, _):
        size = shapes(t, 1).dictitems[1][1]
        size.args.items[0] = pt.Tup([3, 6148914691236517207])
    edit(os.path.join(tag, SHARED_MODEL), fn)


@case("zero12", "frozen_shape_disagrees", "frozen_param_shapes says proj.bias is [6]", STAGE12)
def _(tag, root):
    def fn(t, _):
        frozen = t.get("frozen_param_shapes")
        items = frozen.items if isinstance(frozen, pt.Dct) else frozen.dictitems
        items[-1][1].args.items[0] = pt.Tup([6])
    edit(os.path.join(tag, SHARED_MODEL), fn)


@case("zero12", "round_robin_gradients", "zero_optimization.round_robin_gradients true", STAGE12)
def _(tag, root):
    edit(os.path.join(tag, SHARED_MODEL),
         lambda t, _: dict_set(t.get("ds_config").get("zero_optimization"), "round_robin_gradients", True))


# ------------------------------------------------------------------ layouts ucfs refuses by name
# (src/checkpoint/unserved_layouts.h): each refused at open, naming its file.

@case("unserved", "zenflow", "zero_optimization.zenflow set: ZenFlow's transposed flat buffers", STAGE12)
def _(tag, root):
    edit(os.path.join(tag, SHARED_MODEL),
         lambda t, _: dict_set(t.get("ds_config").get("zero_optimization"), "zenflow",
                               pt.Dct([(pt.Str("topk_ratio"), 0.1)])))


@case("unserved", "mics", "zero_optimization.mics_shard_size 1: MiCS's shard-group optimizer files")
def _(tag, root):
    edit(model(tag), lambda t, _: dict_set(t.get("ds_config").get("zero_optimization"), "mics_shard_size", 1))


@case("unserved", "nvme_offload", "<tag>/offloaded_tensors/rank0: states in NVMe swap files")
def _(tag, root):
    os.makedirs(os.path.join(tag, "offloaded_tensors", "rank0"))


@case("unserved", "split_rank_file", "rank 1's optimizer file in two parts (FastCheckpointEngine)")
def _(tag, root):
    data = read(optim(tag, 1))
    os.remove(optim(tag, 1))
    write(optim(tag, 1) + "-0.2", data[:len(data) // 2])
    write(optim(tag, 1) + "-1.2", data[len(data) // 2:])


@case("unserved", "elastic_checkpoint", "base_optimizer_state a list of each group's states", STAGE12)
def _(tag, root):
    def fn(t, _):
        base = osd(t).get("base_optimizer_state")
        dict_set(osd(t), "base_optimizer_state", pt.Lst([v for _, v in base.get("state").items]))
    for r in range(2):
        edit(optim(tag, r), fn)


# Parameter alignment is served (src/checkpoint/param_alignment.cc): paddings
# that are not one per param of each group are corruption, naming the file.
@case("zero12", "parameter_alignment_wrong_length",
      "param_alignment_paddings [[0, 0], [0, 3, 0]]: fewer paddings than params", STAGE12)
def _(tag, root):
    for r in range(2):
        edit(optim(tag, r), lambda t, _: dict_set(osd(t), "param_alignment_paddings",
                                                   pt.Lst([pt.Lst([0, 0]), pt.Lst([0, 3, 0])])))


@case("unserved", "autoep_layers", "ds_autoep_layers in rank 0's model states")
def _(tag, root):
    edit(model(tag), lambda t, _: dict_set(t, "ds_autoep_layers", pt.Lst([pt.Dct([(pt.Str("ep_size"), 2)])])))


# ------------------------------------------------------------------ tensor and pipeline parallel
# The TP/PP fixtures (tests/data/tp_fixtures, beside the fixtures). ucfs
# serves their universal view and their view at a new D: each broken one
# must get a clear error naming its file, from every command.
TP = "../tp_fixtures/tp_z1_fp32_t2d2"
PP = "../tp_fixtures/pp_bf16opt_p2t2d2"
TP_MODEL0 = "mp_rank_00_model_states.pt"


def edit_info(tag, fn):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: fn(t.get("universal_checkpoint_info")))


@case("parallel", "mp_rank_missing", "zero_pp_rank_1_mp_rank_01 removed", TP)
def _(tag, root):
    os.remove(os.path.join(tag, "zero_pp_rank_1_mp_rank_01_optim_states.pt"))


@case("parallel", "stray_mp_rank", "an mp_rank_02_model_states.pt beside mp_rank_00 and 01", TP)
def _(tag, root):
    shutil.copy(os.path.join(tag, "mp_rank_01_model_states.pt"), os.path.join(tag, "mp_rank_02_model_states.pt"))


@case("parallel", "layer_file_missing", "tensor rank 1's layer_03 removed", PP)
def _(tag, root):
    os.remove(os.path.join(tag, "layer_03-model_01-model_states.pt"))


@case("parallel", "layer_files_mixed", "a layer file without model_NN beside ones with it", PP)
def _(tag, root):
    shutil.copy(os.path.join(tag, "layer_03-model_00-model_states.pt"), os.path.join(tag, "layer_05-model_states.pt"))


@case("parallel", "no_universal_info", "universal_checkpoint_info removed from mp_rank_00", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0),
         lambda t, _: t.items.__setitem__(slice(None), [kv for kv in t.items if kv[0].v != "universal_checkpoint_info"]))


@case("parallel", "universal_info_not_a_dict", "universal_checkpoint_info is a str", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: dict_set(t, "universal_checkpoint_info", pt.Str("patterns")))


@case("parallel", "pattern_not_a_str", "a tp_replicated pattern is an int", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("tp_replicated_parameter_patterns").items.append(7))


@case("parallel", "pattern_unused", "a tp_replicated pattern no param matches", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("tp_replicated_parameter_patterns").items.append(pt.Str("no_such_param")))


@case("parallel", "pattern_python_only", "a pattern with a Python named group", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("tp_replicated_parameter_patterns").items.append(pt.Str("(?P<x>final)")))


@case("parallel", "pattern_matches_twice", "two row-parallel patterns match one param", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("parameter_with_row_parallelism_patterns").items.append(
        pt.Str(r"language_model.encoder.layers.\d+.mlp")))


@case("parallel", "vocab_size_missing", "original_vocab_size removed", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.items.__setitem__(
        slice(None), [kv for kv in info.items if kv[0].v != "original_vocab_size"]))


@case("parallel", "vocab_size_too_big", "original_vocab_size beyond the padded rows", TP)
def _(tag, root):
    edit_info(tag, lambda info: dict_set(info, "original_vocab_size", 1000))


@case("parallel", "vocab_pattern_on_a_bias", "the vocabulary pattern names a 1-D param", TP)
def _(tag, root):
    edit_info(tag, lambda info: info.get("vocabulary_parameter_patterns").items.append(
        pt.Str("language_model.encoder.final_layernorm.bias")))


def affine_info(info, entry):
    dict_set(info, "affine_map", pt.Dct([(pt.Str("version"), 1), (pt.Str("params"), entry)]))


@case("parallel", "affine_map", "an AutoTP affine_map entry without ranks", TP)
def _(tag, root):
    entry = pt.Dct([(pt.Str("logical_shape"), pt.Lst([]))])
    edit_info(tag, lambda info: affine_info(info, pt.Dct([(pt.Str("^language_model.x$"), entry)])))


def first_param_map(tree, rank1_source, rank1_strides=None):
    """An affine map of the first param (local [a, b]) as two row blocks of a [2a, b] param, rank 1's at
    source offset `rank1_source` with source strides `rank1_strides` (row major by default)."""
    name, size = shapes(tree).dictitems[0]
    a, b = [int(v) for v in size.args.items[0].items]

    def piece(rank, source, strides):
        return pt.Dct([(pt.Str("shape"), pt.Lst([a, b])), (pt.Str("source"), pt.Lst([source, pt.Lst(strides)])),
                       (pt.Str("dest"), pt.Lst([0, pt.Lst([b, 1])])), (pt.Str("locations"), pt.Lst([rank]))])

    ranks = pt.Dct([(t, pt.Dct([(pt.Str("shard_shape"), pt.Lst([a, b])),
                               (pt.Str("pieces"), pt.Lst([piece(t, 0 if t == 0 else rank1_source,
                                                                [b, 1] if t == 0 else rank1_strides or [b, 1])]))]))
                    for t in (0, 1)])
    entry = pt.Dct([(pt.Str("logical_shape"), pt.Lst([2 * a, b])), (pt.Str("ranks"), ranks)])
    return pt.Dct([(pt.Str("^" + name.v.replace(".", "\\.") + "$"), entry)])


@case("parallel", "affine_map_overlap", "an affine map whose rank 1 rows overlap rank 0's", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: affine_info(
        t.get("universal_checkpoint_info"), first_param_map(t, 1)))


@case("parallel", "affine_map_huge_strides", "an affine map of strides near 2**63", TP)
def _(tag, root):
    edit(os.path.join(tag, TP_MODEL0), lambda t, _: affine_info(
        t.get("universal_checkpoint_info"), first_param_map(t, 2**62, [2**62 + 1, 2**61])))


@case("parallel", "local_shapes_disagree", "tensor rank 1 lists another local shape", TP)
def _(tag, root):
    def fn(t, _):
        size = shapes(t).dictitems[0][1]
        size.args.items[0] = pt.Tup([4, 16])
    edit(os.path.join(tag, "mp_rank_01_model_states.pt"), fn)


# ------------------------------------------------------------------ experts
# DeepSpeed 0.19.8's MoE checkpoints (tests/data/modern, beside the
# fixtures): W 4, EP 2, the expert group cut over 2 ranks. ucfs serves every
# view of them; each broken one must be refused naming its file, or (a lost
# expert file) pass through as it is, verify naming it.
MOE = "../modern/moe_z2_fp32_e2d2"
AUTOEP = "../modern/autoep_z2_fp32_e2d2"


def param_group(tree, k):
    return osd(tree).get("base_optimizer_state").get("param_groups").items[k]


@case("experts", "partition_count_of_another_rank", "rank 3 cuts the expert group over 4 ranks", MOE)
def _(tag, root):
    edit(optim(tag, 3), lambda t, _: dict_set(osd(t), "partition_count", pt.Lst([4, 4])))


@case("experts", "expert_group_unnamed", "the expert group cut over 2 ranks is named no 'ep_size_N'", MOE)
def _(tag, root):
    edit(optim(tag, 0), lambda t, _: dict_set(param_group(t, 1), "name", pt.Str("experts")))


@case("experts", "ep_size_not_dividing", "the expert group is named 'ep_size_3' at W 4", MOE)
def _(tag, root):
    edit(optim(tag, 0), lambda t, _: dict_set(param_group(t, 1), "name", pt.Str("ep_size_3")))


@case("experts", "expert_file_missing", "layer 0's expert 3 file is gone", MOE)
def _(tag, root):
    os.remove(os.path.join(tag, "layer_0_expert_3_mp_rank_00_model_states.pt"))


@case("experts", "expert_partition_short", "rank 1's expert partition lost its last 100 elements", MOE)
def _(tag, root):
    def fn(t, _):
        part = osd(t).get("single_partition_of_fp32_groups").items[1]
        part.args.items[2] = pt.Tup([444])
    edit(optim(tag, 1), fn)


@case("experts", "autoep_folded", "ds_autoep_layers folded into AutoTP ranks", AUTOEP)
def _(tag, root):
    def fn(t, _):
        for layer in t.get("ds_autoep_layers").items:
            dict_set(layer, "folding", pt.Dct([]))
    edit(os.path.join(tag, "mp_rank_00_model_states.pt"), fn)
