#!/usr/bin/env python3
"""ds_worker.py (same spec, same phases) on fixtures_optimizers.MuonTrickyNet instead of TrickyNet: the rank program
of the muon_* fixtures of make_modern_fixtures.py (tests/tools/modern/fixtures_optimizers.py).

    launch.py -n W -- ds_worker_muon.py --spec SPEC.json --phase train|resume
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds_worker  # noqa: E402 - applies the harness shims, imports torch and deepspeed
import fixtures_optimizers  # noqa: E402
import models  # noqa: E402

if __name__ == "__main__":
    models.TrickyNet = fixtures_optimizers.MuonTrickyNet  # ds_worker.main looks it up at call time
    ds_worker.main()
