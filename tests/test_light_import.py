"""`import autosched` stays light: the heavy optional libraries load on first use, not with the
package (every spawned search worker imports autosched, so each of them would pay for them)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("xgboost", "scipy", "pycuda", "matplotlib", "torch")


def test_import_autosched_loads_no_heavy_library():
    code = (
        "import json, sys, autosched; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []
