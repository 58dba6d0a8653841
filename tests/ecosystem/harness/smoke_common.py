"""What the trainers' smoke programs (smoke_hf.py, smoke_lightning.py) share: the arguments of their two launches and
the line a resumed rank prints (smoke.sh shows each program's [tag] lines)."""
import argparse
import sys


def phase_args():
    """--dir D --phase save|load: the directory both launches share, and which of the two this one is."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--phase", choices=("save", "load"), required=True)
    return ap.parse_args()


def report_resumed(tag, rank, resumed, trained_to):
    """The load launch's line of this rank. resumed: (global step, weight dtypes) as checked at the first step after
    the load against what the save launch recorded; None when no step ran after it (a failure)."""
    assert resumed is not None, "never trained after resuming"
    step, dtypes = resumed
    sys.stdout.write(f"[{tag}] rank {rank}: resumed at step {step} with the saved weights ({', '.join(dtypes)}), "
                     f"bit for bit; trained to step {trained_to}\n")
