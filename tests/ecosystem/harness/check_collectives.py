#!/usr/bin/env python3
"""Checks shims.gloo_16bit_collectives against what a real 16-bit collective computes. One rank of a launch.py run:

    python3 launch.py -n 2 -- check_collectives.py

For each of bf16 and fp16 (values spread over the whole exponent range, subnormals, +-0, inf): all_reduce (SUM, MAX)
equals the ranks' tensors added / maxed in the 16-bit dtype (for 2 ranks a real bf16 all_reduce rounds once, and so
must the shim); all_gather, all_gather_into_tensor (also with the input a view of the output, as ZeRO does),
broadcast, reduce, reduce_scatter_tensor, async_op=True and keyword/positional calls move or combine the bits exactly.
fp32 tensors pass through untouched.
"""
import os
import sys

import shims

shims.gloo_16bit_collectives()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def values(dtype, rank, n=4096):
    g = torch.Generator().manual_seed(7 + rank)
    info = torch.finfo(dtype)
    # Random bit patterns cover every exponent, subnormals and both signs; NaNs are replaced (NaN != NaN).
    bits = torch.randint(-(2 ** 15), 2 ** 15, (n,), generator=g, dtype=torch.int16)
    t = bits.view(dtype).clone()
    t[torch.isnan(t)] = 0
    t[:4] = torch.tensor([0.0, -0.0, info.tiny, info.max], dtype=torch.float32).to(dtype)
    return t


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    failures = []

    def check(name, ok):
        if not ok:
            failures.append(name)

    for dtype in (torch.bfloat16, torch.float16):
        mine = values(dtype, rank)
        all_ = [values(dtype, r) for r in range(world)]
        expect_sum = all_[0].clone()
        for t in all_[1:]:
            expect_sum = expect_sum + t  # 16-bit additions, each rounded once, in rank order
        expect_max = torch.stack(all_).max(dim=0).values

        t = mine.clone(); dist.all_reduce(t)
        if world == 2:
            check(f"{dtype} all_reduce SUM", same(t, expect_sum))
        t = mine.clone(); dist.all_reduce(t, op=dist.ReduceOp.MAX)
        check(f"{dtype} all_reduce MAX", same(t, expect_max))
        t = mine.clone(); w = dist.all_reduce(t, dist.ReduceOp.MAX, None, True); w.wait()
        check(f"{dtype} all_reduce async positional", same(t, expect_max))

        out = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(out, mine)
        check(f"{dtype} all_gather", all(same(o, e) for o, e in zip(out, all_)))

        flat = torch.empty(world * mine.numel(), dtype=dtype)
        dist.all_gather_into_tensor(flat, mine)
        check(f"{dtype} all_gather_into_tensor", same(flat, torch.cat(all_)))
        # ZeRO's pattern: the input is this rank's slice of the output, async.
        flat = torch.zeros(world * mine.numel(), dtype=dtype)
        part = flat.narrow(0, rank * mine.numel(), mine.numel()); part.copy_(mine)
        w = dist.all_gather_into_tensor(output_tensor=flat, input_tensor=part, async_op=True)
        w.wait()
        check(f"{dtype} all_gather_into_tensor aliased async", same(flat, torch.cat(all_)))

        t = mine.clone(); dist.broadcast(t, src=world - 1)
        check(f"{dtype} broadcast", same(t, all_[-1]))

        t = mine.clone(); dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
        if rank == 0:
            check(f"{dtype} reduce MAX", same(t, expect_max))

        big = torch.cat([values(dtype, 100 + r) for r in range(world)])  # same on every rank
        outp = torch.empty_like(mine); dist.reduce_scatter_tensor(outp, big, op=dist.ReduceOp.MAX)
        check(f"{dtype} reduce_scatter_tensor MAX", same(outp, big.view(world, -1)[rank]))

    f = torch.full((3,), float(rank + 1)); before = f.data_ptr()
    dist.all_reduce(f)
    check("fp32 passthrough", f.data_ptr() == before and torch.equal(f, torch.full((3,), float(world * (world + 1) // 2))))

    dist.barrier()
    dist.destroy_process_group()
    if failures:
        sys.stdout.write(f"[collectives] rank {rank}: FAILED {failures}\n")
        sys.exit(1)
    sys.stdout.write(f"[collectives] rank {rank}: 16-bit collectives over gloo match, bit for bit\n")


if __name__ == "__main__":
    main()
