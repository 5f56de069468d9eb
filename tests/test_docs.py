"""The user-facing documents hold together: every relative link resolves (to a file, and for
`#anchor` links into Markdown to a heading), every `scripts/...` or installed `dwlstm-...` command
they show exists and uses only flags its `--help` lists, and nothing cites what users cannot see
(tracker numbers, the project's private specification or papers folder)."""

import configparser
import re
import urllib.parse
from pathlib import Path

import pytest
from conftest import script_help

ROOT = Path(__file__).resolve().parents[1]
# Documents whose links are checked; the command and citation checks read README.md and docs/
# (RESULTS.md too for citations): what a user copies from.
LINKED_DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "RESULTS.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("experiments/**/README.md"),
    }
)
COMMAND_DOCS = sorted({ROOT / "README.md", *ROOT.glob("docs/*.md")})
CITING_DOCS = sorted({*COMMAND_DOCS, ROOT / "RESULTS.md"})

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
SCRIPT = re.compile(r"\bscripts/([\w-]+)\.(py|sh)\b")
# The installed commands (setup.cfg's console entry points) and the script each one is: dwlstm-train
# -> train_translation
_SETUP = configparser.ConfigParser()
_SETUP.read(ROOT / "setup.cfg")
INSTALLED = {
    name.strip(): target.split(":")[0].rsplit(".", 1)[1].strip()
    for name, target in (
        line.split("=")
        for line in _SETUP["options.entry_points"]["console_scripts"].strip().splitlines()
    )
}
COMMAND_NAME = re.compile(r"(?<![\w/.-])(dwlstm-[a-z0-9-]+)(?![\w/.-])")
FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")
FORBIDDEN = {
    "a tracker reference": re.compile(r"\bissues? #?\d+", re.I),
    "a path into the private shared folder": re.compile(r"\.\./shared"),
    "the private specification": re.compile(r"\bSPEC\b"),
    "a numbered paper reference": re.compile(r"\b00[0-4] (§|Eq|Table|Fig|Tables|Eqs)"),
    # "003's", "(003, 004)"
    "a paper by its file number": re.compile(r"(?<![\w.,:/-])00[0-4](?:'s\b|(?![\w/-]|[.,:]\w))"),
}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def without_code(text: str) -> str:
    """Markdown with fenced blocks blanked (their line breaks kept) and inline code spans
    emptied."""
    text = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    return INLINE_CODE.sub("", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every `#anchor` of a Markdown file: heading slugs (repeats numbered -1, -2, ... as GitHub
    does) and HTML anchors."""
    text = path.read_text(encoding="utf-8")
    found, seen = set(), {}
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        slug = github_slug(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found | set(HTML_ANCHOR.findall(text))


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in LINK.findall(without_code(path.read_text(encoding="utf-8"))):
        # https:, mailto:: not checked here (no network)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            continue
        file_part, _, anchor = urllib.parse.unquote(target).partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{target}: {rel(linked)} has no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("path", LINKED_DOCS, ids=rel)
def test_every_relative_link_resolves(path):
    problems = broken_links(path)
    assert not problems, f"{rel(path)} has broken links:\n  " + "\n  ".join(problems)


def test_the_anchor_rules_are_githubs():
    assert github_slug("Start here: two commands") == "start-here-two-commands"
    assert (
        github_slug("Highway Transformer: self-dependency units")
        == "highway-transformer-self-dependency-units"
    )
    assert github_slug("`make test` and [the docs](docs/x.md)") == "make-test-and-the-docs"
    assert (
        github_slug("Results on real data: Multi30k English→German")
        == "results-on-real-data-multi30k-englishgerman"
    )


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Part two\n")
    document = tmp_path / "doc.md"
    document.write_text(
        "[ok](a.md#part-two) [code](`x`) `[not a link](nowhere.md)`\n```\n[nor "
        "this](gone.md)\n```\n[gone](missing.md) [no anchor](a.md#part-three) [here](#nothing)\n"
    )
    assert broken_links(document) == [
        "missing.md: no such file",
        "a.md#part-three: a.md has no heading with the anchor #part-three",
        "#nothing: doc.md has no heading with the anchor #nothing",
    ]


def commands(path: Path) -> list[str]:
    """Every command that names a script: the lines of fenced blocks (continuation lines joined, `#`
    comments cut) and the inline code spans of the prose."""
    text = path.read_text(encoding="utf-8")
    found = []
    for block in FENCE.finditer(text):
        for line in re.sub(r"\\\n", " ", block.group(0)).splitlines():
            found.append(re.sub(r"(^|\s)#.*", "", line))
    found += [span for _, span in INLINE_CODE.findall(FENCE.sub("", text))]
    return [command for command in found if named_scripts(command)]


def named_scripts(segment: str) -> list[tuple[str, str, int, int]]:
    """(script, kind, start, end) of each `scripts/<name>.py|sh` and each installed command
    (`dwlstm-train`: its script, train_translation) in `segment`, in order."""
    found = [
        (match.group(1), match.group(2), match.start(), match.end())
        for match in SCRIPT.finditer(segment)
    ]
    found += [
        (INSTALLED[match.group(1)], "py", match.start(), match.end())
        for match in COMMAND_NAME.finditer(segment)
        if match.group(1) in INSTALLED
    ]
    return sorted(found, key=lambda item: item[2])


def script_flags(command: str) -> list[tuple[str, str]]:
    """(script, flag) for each flag after each `scripts/<name>.py` of a command (flags before it are
    a launcher's)."""
    pairs = []
    for segment in re.split(r"\|\||&&|[|;]", command):
        scripts = named_scripts(segment)
        for (name, kind, _, end), following in zip(scripts, [*scripts[1:], None]):
            if kind == "py":
                arguments = segment[end : following[2] if following else None]
                pairs += [(name, flag.split("=")[0]) for flag in FLAG.findall(arguments)]
    return pairs


@pytest.mark.parametrize("path", COMMAND_DOCS, ids=rel)
def test_every_script_named_exists(path):
    text = path.read_text(encoding="utf-8")
    missing = sorted(
        {match.group(0) for match in SCRIPT.finditer(text) if not (ROOT / match.group(0)).is_file()}
    )
    missing += sorted(
        {
            segment.split()[0]
            for command in commands(path)
            for segment in re.split(r"\|\||&&|[|;]", command)
            if segment.split()
            and segment.split()[0].startswith("dwlstm-")
            and segment.split()[0] not in INSTALLED
        }
    )
    assert not missing, f"{rel(path)} names scripts that do not exist: {missing}"


@pytest.mark.parametrize("path", COMMAND_DOCS, ids=rel)
def test_every_flag_of_a_shown_command_is_in_its_scripts_help(path):
    unknown = sorted(
        {
            f"scripts/{name}.py {flag}"
            for command in commands(path)
            for name, flag in script_flags(command)
            if (ROOT / "scripts" / f"{name}.py").is_file()
            and flag not in FLAG.findall(script_help(name))
        }
    )
    assert not unknown, (
        f"{rel(path)} shows flags that its scripts' --help does not list:\n  "
        + "\n  ".join(unknown)
    )


def test_flags_are_read_from_whole_commands():
    command = (
        "accelerate launch --multi_gpu scripts/train_translation.py --model_name_or_path m   "
        "--max_tokens 1 --dataset=d && python scripts/average_checkpoints.py --last 5"
    )
    assert script_flags(command) == [
        ("train_translation", "--model_name_or_path"),
        ("train_translation", "--max_tokens"),
        ("train_translation", "--dataset"),
        ("average_checkpoints", "--last"),
    ]
    installed = (
        "dwlstm-train --dataset d --model_name_or_path hub_configs/dwlstm-base-6l.json | "
        "dwlstm-translate --quiet"
    )
    assert script_flags(installed) == [
        ("train_translation", "--dataset"),
        ("train_translation", "--model_name_or_path"),
        ("translate", "--quiet"),
    ]


@pytest.mark.parametrize("path", CITING_DOCS, ids=rel)
def test_nothing_cites_what_users_cannot_see(path):
    text = path.read_text(encoding="utf-8")
    found = [
        f"{what}: {match.group(0)!r} on line {text.count(chr(10), 0, match.start()) + 1}"
        for what, pattern in FORBIDDEN.items()
        for match in pattern.finditer(text)
    ]
    assert not found, (
        f"{rel(path)} cites what users cannot see (cite papers by authors and year):\n  "
        + "\n  ".join(found)
    )


# A path into experiments/ named in prose or code (not the large run folders under
# runs/experiments/, a file in git history such as 76ceeec:experiments/..., nor a pattern such as
# experiments/NAME): a table's source, which has to be there to regenerate the table.
EXPERIMENT_PATH = re.compile(r"(?<![\w./:-])experiments/[\w.-]+(?:/[\w.*-]+)*/?")
SOURCE_DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "RESULTS.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("experiments/**/README.md"),
    }
)


def missing_sources(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    named = {match.group(0).rstrip(".") for match in EXPERIMENT_PATH.finditer(text)}
    return sorted(
        name
        for name in named
        if not re.search(r"[A-Z*<]|NAME", name.split("/", 1)[1]) and not (ROOT / name).exists()
    )


@pytest.mark.parametrize("path", SOURCE_DOCS, ids=rel)
def test_every_named_experiments_file_exists(path):
    """Every file or folder under experiments/ that a table or claim names (by link, in code or in
    prose) is in the repository, so each table can be regenerated from what is kept."""
    missing = missing_sources(path)
    assert not missing, (
        f"{rel(path)} names experiments/ files that are not there:\n  " + "\n  ".join(missing)
    )


def test_a_missing_source_is_found(tmp_path):
    document = tmp_path / "doc.md"
    document.write_text(
        "From `experiments/speed/records/avx2.json` and experiments/speed/gone.txt; "
        "runs/experiments/x/y is a run folder, experiments/NAME a pattern, "
        "`git show 76ceeec:experiments/old.txt` a file in history.\n"
    )
    assert missing_sources(document) == ["experiments/speed/gone.txt"]


DATED_HEADING = re.compile(
    r"\b(?:19|20)\d\d-\d\d(?:-\d\d)?\b|\b(?:January|February|March|April|May|June|July|"
    r"August|September|October|November|December) \d|\b(?:morning|evening|night)\)"
)


@pytest.mark.parametrize("path", sorted(ROOT.glob("docs/**/*.md")), ids=rel)
def test_no_user_page_has_a_dated_heading(path):
    """The user docs say what is true now; the history of how it was found (dated passes, rounds)
    belongs to the study's README under experiments/."""
    dated = [
        heading
        for _, heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))
        if DATED_HEADING.search(heading)
    ]
    assert not dated, (
        f"{rel(path)} has dated headings (move the history to experiments/<study>/README.md): "
        f"{dated}"
    )


def test_a_dated_heading_is_found():
    assert DATED_HEADING.search("Round three, fourth pass, on the AVX2 CPU (2026-11-27, night)")
    assert DATED_HEADING.search("Run 5 (November 24)") and DATED_HEADING.search(
        "The third pass (evening)"
    )
    assert not DATED_HEADING.search("What may import what") and not DATED_HEADING.search(
        "Xu et al. 2024, Table 7"
    )
