"""The model code (modeling_dwlstm/, what a Hub repository's remote code runs) stands on public
ground: no private transformers method, no transformers table that older or newer releases lack, no
private torch module imported when a model file is imported; and every file it needs travels with a
saved model under every supported transformers."""

import ast
import re
from pathlib import Path

import pytest
from transformers.dynamic_module_utils import get_relative_import_files, get_relative_imports

import modeling_dwlstm

PACKAGE = Path(modeling_dwlstm.__file__).parent
FILES = sorted(PACKAGE.glob("*.py"))
# Private GenerationMixin methods that change between transformers releases (each did between 5.0
# and 5.24, in its signature, its home or its existence).
PRIVATE_NAMES = (
    "_flatten_beam_dim",
    "_unflatten_beam_dim",
    "_gather_beams",
    "_update_finished_beams",
    "_get_running_beams_for_next_iteration",
    "_check_early_stop_heuristic",
    "_beam_search_has_unfinished_sequences",
    "_update_model_kwargs_for_generation",
    "_valid_auto_compile_criteria",
    "_default_compile_config",
    "_prefill",
)


def occurrences(pattern) -> list[str]:
    found = []
    for path in FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern(line):
                found.append(f"{path.name}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("name", PRIVATE_NAMES)
def test_no_private_transformers_name(name):
    word = re.compile(rf"\b{name}\b")
    found = occurrences(word.search)
    assert not found, (
        f"modeling_dwlstm/ uses {name}, which transformers does not promise to keep:\n"
        + "\n".join(found)
    )


def test_the_removed_tasks_table_is_never_imported_and_read_in_one_guarded_place():
    """transformers' table of removed pipeline tasks (5.19 on; older releases lack it) is never
    imported: the one place that reads it, so that `pipeline("translation", model=model)` works in
    this process, reads it with a default, and a release without it changes nothing."""
    found = occurrences(re.compile(r"\bREMOVED_TASKS\b").search)
    code = [line for line in found if not line.split(": ", 1)[1].startswith(("(", "`", "#", '"'))]
    assert len(code) == 1 and 'getattr(transformers.pipelines, "REMOVED_TASKS", {})' in code[0], (
        code
    )


def import_time_statements(tree: ast.AST):
    """The nodes that run when the module is imported: everything outside function bodies."""
    for node in ast.iter_child_nodes(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node
            yield from import_time_statements(node)


def private_torch_modules(node: ast.AST) -> list[str]:
    """The private torch modules that `import torch._x`, `from torch._x import y` or
    `from torch.a import _x` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.startswith("torch._")]
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
        if any(part.startswith("_") for part in node.module.split(".")):
            return [node.module]
        return [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
    return []


def test_no_private_torch_module_imported_with_a_model_file():
    found = [
        f"{path.name}:{node.lineno}: {name}"
        for path in FILES
        for node in import_time_statements(ast.parse(path.read_text(encoding="utf-8")))
        for name in private_torch_modules(node)
    ]
    assert not found, (
        "private torch modules imported at module level (import them where they are needed):\n"
        + ("\n".join(found))
    )


@pytest.mark.parametrize(
    "member", modeling_dwlstm.MEMBERS, ids=lambda member: member.config_class.model_type
)
def test_each_model_file_imports_every_file_it_needs_itself(member):
    """transformers 5.4 to 5.9 copy a local model folder's remote code without following relative
    imports further than the file that auto_map names: that file must import every file of the
    model's code itself."""
    path = Path(__import__(member.generation_class.__module__, fromlist=["_"]).__file__)
    needed = {Path(file).stem for file in get_relative_import_files(path)}
    missing = needed - set(get_relative_imports(path))
    assert not missing, (
        f"{path.name} needs {sorted(missing)} through other files: import them in it directly"
    )
