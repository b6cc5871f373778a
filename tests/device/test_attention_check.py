"""benchmarks/attention_check.py, the device check behind docs/devices-measured.md's causal attention,
rehearsed at tiny sizes on the host (XLA's kernel there: it masks after computing every score)."""
import importlib.util
import json

import pytest

from conftest import ROOT

HAS_JAX = importlib.util.find_spec("jax") is not None


def _script():
    spec = importlib.util.spec_from_file_location("attention_check", ROOT / "benchmarks" / "attention_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAX, reason="the check runs JAX: pip install 'symcost[jax]'")
def test_the_rehearsal_times_both_masks_both_passes_and_writes_its_rows(tmp_path, capsys):
    out = tmp_path / "attention.json"
    assert _script().main(["--quick", "--runs", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["kernel"], r["tokens"], r["pass"]) for r in rows] == [
        ("xla", 128, p) for p in ("forward", "forward+backward")]
    for r in rows:
        assert r["full_s"] > 0 and r["causal_s"] > 0 and r["ratio"] == pytest.approx(r["causal_s"] / r["full_s"])
        # TFLOP/s count the whole square for the full kernel and half of it for the causal one
        mult = 1.0 if r["pass"] == "forward" else 2.5
        flops = 4.0 * r["tokens"] ** 2 * 4 * 16 * mult
        assert r["full_tflops"] == pytest.approx(flops / r["full_s"] / 1e12)
        assert r["causal_tflops"] == pytest.approx(flops / 2 / r["causal_s"] / 1e12)
    assert "causal/full" in capsys.readouterr().out
