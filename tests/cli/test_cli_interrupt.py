"""Ctrl-C while the command line loads its commands ends in one line and status 130, not in
an import traceback; `import autosched` itself loads nothing but the standard library."""

from __future__ import annotations

import subprocess
import sys

import autosched.cli


class InterruptingFinder:
    """A meta path finder that raises KeyboardInterrupt when `name` is imported."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_the_commands_load_is_one_line(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "autosched.cli.app", raising=False)
    monkeypatch.setattr(sys, "meta_path", [InterruptingFinder("autosched.cli.app"), *sys.meta_path])
    assert autosched.cli.main(["show", "log.json"]) == 130
    assert capsys.readouterr().err == "autosched: interrupted\n"


def test_import_autosched_loads_only_the_standard_library():
    code = (
        "import sys, autosched, autosched.cli, autosched.install; "
        "print(sorted(m.split('.')[0] for m in sys.modules if m.startswith(('numpy', 'measure'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_public_names_load_on_first_use():
    import autosched

    assert set(autosched.__all__) <= set(dir(autosched))
    for name in autosched.__all__:
        assert getattr(autosched, name) is not None
    try:
        autosched.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'no_such_name'" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
