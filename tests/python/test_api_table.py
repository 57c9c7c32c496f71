"""docs/api.md, the table of torch_npu's public API with our status per name, against the real
modules: a name marked ours / composite / refuses must exist, a name marked missing must not
(so the table is updated when it arrives), every exported name must have a row, and an
environment variable marked ours must be read somewhere in the source."""

import importlib
import importlib.util
import os
import re

import pytest
import torch

import torch_npu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "api.md")
STATUSES = {"ours", "composite", "refuses", "missing"}


def _rows() -> dict[str, list[tuple[str, str]]]:
    """{section title: [(name, status), ...]} from the page's tables."""
    sections: dict[str, list[tuple[str, str]]] = {}
    title = None
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                title = line[3:].split(" (")[0].strip()
                sections[title] = []
            m = re.match(r"\| `([^`]+)` \| (\w+) \|", line)
            if m and title:
                assert m.group(2) in STATUSES, f"{line.strip()}: unknown status"
                sections[title].append((m.group(1), m.group(2)))
    return sections


ROWS = _rows()


def _resolve(dotted: str):
    """The object a dotted name names, or None; a module is found without importing it (so the
    table can list torch_npu.contrib.transfer_to_npu without patching torch here)."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        name = ".".join(parts[:i + 1])
        spec = importlib.util.find_spec(name) if hasattr(obj, "__path__") else None
        if spec is None:
            return None
        if i + 1 < len(parts):
            obj = importlib.import_module(name)
        else:
            return spec
    return obj


def _check(dotted: str, status: str) -> None:
    found = _resolve(dotted) is not None
    if status == "missing":
        assert not found, (f"{dotted} exists now: mark its row in docs/api.md ours / composite "
                           "/ refuses")
    else:
        assert found, f"{dotted} is marked {status} in docs/api.md but does not exist"


def test_the_page_has_every_section():
    sections = {"torch.npu", "torch_npu operators", "Other modules", "Environment variables"}
    assert sections <= set(ROWS)
    assert len(ROWS["torch.npu"]) > 140 and len(ROWS["torch_npu operators"]) > 80


@pytest.mark.parametrize("name,status", ROWS["torch.npu"], ids=[n for n, _ in ROWS["torch.npu"]])
def test_torch_npu_row(name, status):
    _check(f"torch.npu.{name}", status)


@pytest.mark.parametrize("name,status", ROWS["torch_npu operators"],
                         ids=[n for n, _ in ROWS["torch_npu operators"]])
def test_operator_row(name, status):
    _check(f"torch_npu.{name}", status)
    if status == "composite":
        assert name in torch_npu._utility_ops.__all__ + torch_npu._detection_ops.__all__
    if status in ("ours", "composite"):  # both spellings, as in torch_npu
        assert hasattr(torch.ops.npu, name), f"torch.ops.npu.{name} is not registered"


@pytest.mark.parametrize("name,status", ROWS["Other modules"],
                         ids=[n for n, _ in ROWS["Other modules"]])
def test_other_module_row(name, status):
    _check(name, status)


def test_refusing_names_refuse():
    for name, status in ROWS["torch.npu"]:
        if status == "refuses":
            with pytest.raises(NotImplementedError):
                getattr(torch.npu, name)()


def test_every_exported_name_has_a_row():
    listed = {n for n, _ in ROWS["torch.npu"]}
    assert sorted(set(torch.npu.__all__) - listed) == []
    ops = {n for n, _ in ROWS["torch_npu operators"]}
    assert sorted(n for n in torch_npu.__all__ if n not in ops and n not in
                  ("npu", "profiler", "utils", "__version__")) == []
    others = {n for n, _ in ROWS["Other modules"]}
    for module in ("torch_npu.profiler", "torch_npu.optim"):
        exported = importlib.import_module(module).__all__
        assert sorted(f"{module}.{n}" for n in exported if f"{module}.{n}" not in others) == []


def _source_text() -> str:
    """The source that could read a variable; collect_env only reports variables (it lists
    ones it does not act on, such as TASK_QUEUE_ENABLE), so it does not count."""
    text = []
    for folder in ("runtime", "allocator", "adapter", "torch_npu", "kernels", "tools"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                if f.endswith((".cpp", ".h", ".py", ".sh", ".in")) and f != "collect_env.py":
                    with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                        text.append(fh.read())
    return "\n".join(text)


def test_environment_variables_marked_ours_are_read_and_missing_ones_are_not():
    source = _source_text()
    for name, status in ROWS["Environment variables"]:
        quoted = f'"{name}"' in source or f"'{name}'" in source or f"{name}=" in source
        if status == "missing":
            assert not quoted, f"{name} is read in the source now: update its row in docs/api.md"
        else:
            assert quoted, f"{name} is marked {status} but nothing in the source reads it"
