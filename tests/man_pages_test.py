"""The man pages agree with the binary.

ucfs.1: every command `ucfs --help` lists is documented, and every option
`ucfs COMMAND --help` prints is documented under that command (or among the
global OPTIONS); every option documented under a command exists in its
--help. The commands come from `ucfs --help`, so a new command must come
with its documentation.

mount.fuse.ucfs.8: every ucfs option the helper's --help lists is
documented, and every one documented is known to the helper.

All pages format without groff warnings, and mount.ucfs.8 points at
mount.fuse.ucfs.8.

Usage: man_pages_test.py UCFS MANDIR
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
from mount_testing import Results  # noqa: E402

# An option in roff: \-\-name or \-x, not inside a longer word.
ROFF_LONG = re.compile(r"\\-\\-([a-z0-9][a-z0-9]*(?:\\?-[a-z0-9]+)*)")
ROFF_SHORT = re.compile(r"(?<![\\\w-])\\-([a-zA-Z])(?![\w\\])")


def help_text(*cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}: {p.stderr}"
    return p.stdout


def help_section(text, title):
    """The entries under `title:` in CLI11's --help: lines indented by exactly two spaces."""
    entries, inside = [], False
    for line in text.splitlines():
        if not line.startswith(" "):
            inside = line.strip() == title + ":"
            continue
        if inside and re.match(r"  \S", line):
            entries.append(line.split()[0])
    return entries


def help_options(text):
    """{'--tag', '-f', ...} from the Options: section of a --help."""
    opts = set()
    for entry in help_section(text, "Options"):
        opts.update(o for o in entry.split(",") if o.startswith("-"))
    return opts


def roff_options(lines):
    """The options named in roff lines, as {'--tag', '-f', ...}."""
    opts = set()
    for line in lines:
        opts.update("--" + m.replace("\\", "") for m in ROFF_LONG.findall(line))
        opts.update("-" + m for m in ROFF_SHORT.findall(line))
    return opts


def sections(page):
    """{'.SH' title: [lines]}."""
    out, current = {}, None
    for line in page.splitlines():
        if line.startswith(".SH "):
            current = line[4:].strip().strip('"')
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def command_blocks(lines):
    """{command: [option tag lines]} from COMMANDS: each top-level `.TP` tag
    (`.B mount \\fICKPT MNT\\fR`) opens a command; the `.TP` and `.TQ` tags
    inside its `.RS`/`.RE` are its options."""
    blocks, current, depth = {}, None, 0
    for i, line in enumerate(lines):
        if line.startswith(".RS"):
            depth += 1
        elif line.startswith(".RE"):
            depth -= 1
        elif line.startswith((".TP", ".TQ")) and i + 1 < len(lines):  # .TQ: one more tag
            tag = lines[i + 1]
            if depth == 0:
                m = re.match(r"\.B\s+([a-z][a-z0-9-]*)", tag)
                assert m, f"a command's tag that names no command: {tag!r}"
                current = m.group(1)
                blocks.setdefault(current, [])
            elif current is not None:
                blocks[current].append(tag)
    return blocks


def main():
    ucfs, mandir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    results = Results()
    with open(os.path.join(mandir, "ucfs.1")) as f:
        page = f.read()
    secs = sections(page)
    blocks = command_blocks(secs["COMMANDS"])
    global_doc = roff_options(secs["OPTIONS"])
    top_help = help_text(ucfs, "--help")
    commands = help_section(top_help, "Subcommands")

    def commands_listed():
        assert commands, "no commands in ucfs --help"

    def every_command_documented():
        synopsis = "\n".join(secs["SYNOPSIS"])
        for c in commands:
            assert c in blocks, f"ucfs {c} is not under COMMANDS in ucfs.1"
            assert re.search(rf"^\.B ucfs {c}\b", synopsis, re.M), f"ucfs {c} is not in the SYNOPSIS"
        extra = set(blocks) - set(commands)
        assert not extra, f"ucfs.1 documents commands ucfs --help does not list: {sorted(extra)}"

    def global_options_agree():
        have = help_options(top_help)
        assert global_doc == have, f"OPTIONS documents {sorted(global_doc)}, ucfs --help has {sorted(have)}"

    results.check("ucfs --help lists commands", commands_listed)
    results.check("every command is documented in ucfs.1, and only those", every_command_documented)
    results.check("ucfs.1 OPTIONS == ucfs --help options", global_options_agree)

    for c in commands:
        def command_agrees(c=c):
            have = help_options(help_text(ucfs, c, "--help"))
            documented = roff_options(blocks.get(c, []))
            missing = {o for o in have if o not in documented and o not in global_doc}
            assert not missing, f"ucfs {c} --help has options ucfs.1 does not document: {sorted(missing)}"
            unknown = documented - have
            assert not unknown, f"ucfs.1 documents options ucfs {c} --help lacks: {sorted(unknown)}"

        results.check(f"ucfs {c}: --help and ucfs.1 agree", command_agrees)

    def helper_page_agrees():
        with open(os.path.join(mandir, "mount.fuse.ucfs.8")) as f:
            lines = sections(f.read())["OPTIONS"]
        # The ucfs options are the tags of the "ucfs options" subsection.
        start = lines.index(".SS ucfs options")
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(".SS"))
        documented = set()
        for i in range(start, end):
            if lines[i].startswith(".TP"):
                documented.update(re.findall(r"\b([a-z_]+)(?==|\b)", lines[i + 1].split(None, 1)[1]))
        with tempfile.TemporaryDirectory() as tmp:
            helper = os.path.join(tmp, "mount.fuse.ucfs")
            os.symlink(ucfs, helper)
            usage = help_text(helper, "--help")
        listed = set()
        inside = False
        for line in usage.splitlines():
            if line == "ucfs options:":
                inside = True
            elif inside and line.startswith("  "):
                listed.add(line.split()[0].split("=")[0])
            else:
                inside = False
        assert listed, usage
        assert documented == listed, (
            f"mount.fuse.ucfs.8 documents {sorted(documented)}, the helper lists {sorted(listed)}")
        # Each maps onto a `ucfs mount` option that exists.
        mount_opts = help_options(help_text(ucfs, "mount", "--help"))
        for flag in re.findall(r"(?<=  )--[a-z-]+|(?<= )-v(?=:)", usage):
            assert flag in mount_opts, f"the helper maps onto {flag}, which ucfs mount lacks"

    def pages_format_cleanly():
        for name in sorted(os.listdir(mandir)):
            path = os.path.join(mandir, name)
            with open(path) as f:
                text = f.read()
            if text.startswith(".so "):
                target = text.split()[1]
                assert text == f".so {target}\n", f"{name}: a link page holds only .so"
                assert os.path.isfile(os.path.join(mandir, os.path.basename(target))), name
                assert os.path.basename(os.path.dirname(target)) == "man" + name.rsplit(".", 1)[1], name
                continue
            p = subprocess.run(["groff", "-man", "-ww", "-z", path], capture_output=True, text=True)
            assert p.returncode == 0 and not p.stderr, f"{name}: {p.stderr}"

    results.check("mount.fuse.ucfs.8 documents exactly the helper's options", helper_page_agrees)
    results.check("man pages format without warnings; link pages resolve", pages_format_cleanly)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
