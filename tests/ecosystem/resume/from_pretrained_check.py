#!/usr/bin/env python3
"""AutoModelForCausalLM.from_pretrained(MNT/checkpoint-K) on a run mounted read-only by ucfs, against the consolidated
fp32 weights cast to the training dtype (resume_checks.sh), inside the modern root. One process, no DeepSpeed.

    python3 from_pretrained_check.py --spec SPEC.json

SPEC.json: {"cases": [{"dir": MNT/checkpoint-K, "references": {"<label>": <a pytorch_model.bin: the fixture's own
            zero_to_fp32.py output, or ucfs's <tag>_fp32/pytorch_model.bin>}}], "dtype": "bfloat16"|"float32",
            "result": PATH}
For each case: from_pretrained loads (transformers' default dtype: the checkpoint's, from config.json's dtype and the
safetensors), then every tensor of the model's state dict is compared bit for bit with each reference's tensor of the
same name cast to the training dtype with torch's .to() (a tied lm_head.weight with embed_tokens'; non-persistent
buffers such as rotary inv_freq are not in either file and are left out).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcommon  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402


def main():
    spec = rcommon.spec_arg()
    dtype = getattr(torch, spec["dtype"])
    out = []
    for case in spec["cases"]:
        ent = {"dir": case["dir"], "listing": sorted(os.listdir(case["dir"]))}
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(case["dir"])
        except Exception as e:  # noqa: BLE001
            ent["error"] = f"{type(e).__name__}: {e}"[:400]
            out.append(ent)
            continue
        sd = model.state_dict()
        persistent = set(sd)
        ent["dtype"] = str(next(model.parameters()).dtype)
        ent["tied"] = bool(getattr(model.config, "tie_word_embeddings", False))
        ent["refs"] = {}
        for label, path in case["references"].items():
            ref = torch.load(path, map_location="cpu", weights_only=True)
            same, differ, missing = 0, [], []
            for name in sorted(persistent):
                want = ref.get(name)
                if want is None and ent["tied"] and name == "lm_head.weight":
                    want = ref.get("model.embed_tokens.weight")
                if want is None:
                    missing.append(name)
                    continue
                want = want.to(dtype)
                got = sd[name]
                if got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want):
                    same += 1
                else:
                    d = (got.float() - want.float()).abs().max().item() if got.shape == want.shape else None
                    differ.append(f"{name}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
                                  + (f", max |diff| {d:.3e}" if d is not None else ""))
            ent["refs"][label] = {"same": same, "differ": differ, "missing": missing,
                                  "ref_only": sorted(set(ref) - persistent)}
        out.append(ent)
    with open(spec["result"], "w") as f:
        json.dump({"cases": out}, f, indent=1)


if __name__ == "__main__":
    main()
