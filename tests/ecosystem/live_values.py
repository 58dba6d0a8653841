"""The values a resumed DeepSpeed engine holds right after load_checkpoint, judged against the ones the saving
run held at save time (MODERN.json live_state and module_values; the workers' resume phase writes the loaded ones
in the same form: a sha256 per tensor). Shared by the resume tests of tests/ecosystem."""


def differing(facts, loaded):
    """Names whose bytes differ between the save-time values and those right after the load, and names the load
    holds that the save did not."""
    bad = []
    for name, states in facts["live_state"]["params"].items():
        for key, want in states.items():
            got = loaded["live"]["params"].get(name, {}).get(key)
            if not got or got.get("sha256") != want["sha256"]:
                bad.append(f"{name}.{key}")
    for name, want in facts["module_values"]["params"].items():
        got = loaded["module"]["params"].get(name)
        if not got or got.get("sha256") != want["sha256"]:
            bad.append(f"module.{name}")
    extra = sorted(set(loaded["live"]["params"]) - set(facts["live_state"]["params"]))
    return bad + [f"{n} (not in the saved state)" for n in extra]
