"""symcost on the devices: the line fit, the timing harness, the preset a calibration writes, and both
commands end to end on 8 forced CPU host devices (in a subprocess, so that JAX sees them)."""
import importlib.util
import io
import json
import math
import os
import select
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import symcost
from symcost.cli import main
from symcost.device import fit_line
from symcost.device.calibrate import Calibration, CollectiveFit, Sweep
from symcost.device.bench import Sample
from symcost.device.preset import build_preset, provisional, to_toml
from symcost.device.runtime import DeviceInfo
from symcost.device.timing import Timing, spread, time_call
from symcost.errors import UsageError
from symcost.hardware import hardware, parse

from conftest import ROOT

SCHEMAS = ROOT / "symcost" / "schemas"
HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
NEEDS_JAX = pytest.mark.skipif(not HAS_JAX, reason="calibrate and measure need the jax extra: pip install 'symcost[jax]'")
EIGHT = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}


# ------------------------------------------------------------------------------------------------ the fit


def test_a_line_is_recovered_exactly():
    sizes = [4e3, 6.4e4, 1e6, 1.6e7, 2.56e8]
    f = fit_line(sizes, [12e-6 + b / 3.5e11 for b in sizes])
    assert f.latency == pytest.approx(12e-6, rel=1e-9)
    assert f.bandwidth == pytest.approx(3.5e11, rel=1e-9)
    assert f.residual < 1e-9 and f.rms < 1e-9


def test_a_fitted_line_reproduces_its_points_within_its_residual():
    sizes = [4e3, 1.6e4, 6.4e4, 2.56e5, 1e6, 4e6]
    noise = [1.07, 0.95, 1.02, 0.9, 1.12, 0.97]
    f = fit_line(sizes, [(30e-6 + b / 2e9) * k for b, k in zip(sizes, noise)])
    assert 0.05 < f.residual < 0.2               # the noise is at most 12 %
    for b, t in f.points:
        assert abs(f.seconds(b) - t) / t <= f.residual + 1e-12
    assert max(abs(e) for e in f.errors()) == pytest.approx(f.residual)
    assert f.latency == pytest.approx(30e-6, rel=0.3) and f.bandwidth == pytest.approx(2e9, rel=0.2)


def test_a_line_fit_keeps_the_latency_non_negative_and_refuses_one_size():
    f = fit_line([1e3, 1e6], [1e-9, 1e-3])       # through the origin: no negative latency
    assert f.latency >= 0
    with pytest.raises(UsageError):
        fit_line([1e3, 1e3], [1e-6, 2e-6])
    with pytest.raises(UsageError):
        fit_line([1e3, 1e6], [1e-6, -1.0])


# ------------------------------------------------------------------------------------ the lowering it runs


def _tiny(tmp_path, K=2):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps({"name": "tiny", "L": 4, "D": 128, "F": 512, "N": 8, "K": K, "H": 16, "V": 512,
                               "source": "a test model"}))
    return cfg


def _train_layer(cfg):
    from symcost.models.config import load_model_config
    from symcost.models.inference import default_mesh
    from symcost.models.transformer import layer_program, sizes
    from symcost.program import derive_program
    c = load_model_config(str(cfg))
    mesh, sh = default_mesh(c, 8)
    host = provisional(DeviceInfo("cpu", "a test CPU", 8, 2e9, "0.0"))     # its plan slices X, then reads it whole
    return derive_program(layer_program(c, sh, elementwise=False), mesh=mesh,
                          dims=sizes(c, batch=8, seq=64, context=64), hw=host, moves="all", overlap="step",
                          backward=True)


def test_a_lowering_by_layout_reads_each_layout_as_it_was_and_leaves_no_step_dead(tmp_path):
    import re
    from symcost.device.programs import lowered
    from symcost.export.lowering import layout_key
    plan = _train_layer(_tiny(tmp_path))
    low, names = lowered(plan)
    # the forward slices X[B, T, D] to X[B_Z, T, D] for two of the Q, K, V projections (the third has an
    # equally fast plan that communicates less with the backward pass, and takes it): each slice reads X
    # whole, as it was (a tensor as one variable changed in place would be sliced over and over)
    slices = [s for s in low.steps if getattr(s.op, "kind", "") == "Slice" and s.output.name == "X"]
    whole = names(layout_key(slices[0].inputs[0]))
    assert len(slices) == 2 and all(s.lines[0] == f"{names(layout_key(s.output))} = {whole}" for s in slices)
    assert whole in {names(layout_key(t)) for t in low.inputs}
    assert not any(line.startswith(f"{whole} = ") for line in low.body)     # never written over
    # every value the program makes is read later or returned: the compiler can drop none of them
    outs = {names(layout_key(t)) for t in low.outputs}
    body = low.body
    for i, line in enumerate(body):
        target = line.split(" = ", 1)[0]
        later = " ".join(b.split(" = ", 1)[1] for b in body[i + 1:])
        assert target in outs or re.search(rf"\b{target}\b", later), line
    # the backward's two contributions to dY are summed after their AllReduces, as a framework does
    assert sum(1 for line in body if re.match(r"^(t\d+) = \1 \+ t\d+$", line)) >= 2


# ---------------------------------------------------------------------------------------------- the timing


def test_spread_is_the_interquartile_range_over_the_median():
    assert spread([1, 2, 3, 4, 5]) == pytest.approx(2 / 3)
    assert spread([7.0]) == 0.0


def test_timing_blocks_on_each_run_and_batches_short_calls():
    waited = []
    t = time_call(lambda: len(waited), block=waited.append, runs=4, warmup=2, min_run=1e-3)
    assert t.runs == 4 and len(t.samples) == 4
    assert t.inner > 1                       # a call far shorter than a millisecond is batched
    assert len(waited) == 2 + 4              # warm-up calls and one wait per timed run
    assert t.median == sorted(t.samples)[1] or t.median == pytest.approx(sum(sorted(t.samples)[1:3]) / 2)


# ----------------------------------------------------------------------------- the preset of a calibration


def _timing(seconds, runs=20):
    return Timing(seconds, runs, 0.02, 1, (seconds,) * runs)


def _sweep(monkeypatch, rates: dict, sizes) -> tuple:
    """``matmul_to_peak`` over ``sizes`` with each size's readings taken in turn from ``rates``: (its
    samples, whether it reached the peak, the sizes timed in order)."""
    from symcost.device import bench, calibrate
    timed = []

    def matmul(n, dtype, runs, key):
        timed.append(n)
        flops = 2.0 * n ** 3
        return Sample(n, flops, _timing(flops / rates[n].pop(0)))
    monkeypatch.setattr(bench, "matmul", matmul)
    return (*calibrate.matmul_to_peak(sizes, "bf16", 3, None), timed)


def test_the_matmul_sweep_times_its_fastest_sizes_again(monkeypatch):
    """The sweep stops where three sizes in a row agree; a size read low once (another process on the
    machine) can make them agree below the peak. Its three fastest sizes are then timed again and the faster
    reading of each kept: here 512 reads 39.8 GFLOP/s, then 44.9 (the 8 devices' einsum of 1024^3 blocks
    reached 47 GFLOP/s, 17 % over the peak first taken)."""
    rates = {128: [10e9], 256: [39.5e9, 38.0e9], 512: [39.8e9, 44.9e9], 1024: [40.2e9, 41.0e9]}
    pts, reached, timed = _sweep(monkeypatch, rates, (128, 256, 512, 1024))
    assert reached and timed == [128, 256, 512, 1024, 1024, 512, 256]   # 256, 512, 1024 agreed: it stopped
    assert [p.size for p in pts] == [128, 256, 512, 1024]
    assert max(p.rate for p in pts) == pytest.approx(44.9e9) and pts[3].rate == pytest.approx(41.0e9)
    assert pts[1].rate == pytest.approx(39.5e9)                         # the slower second reading is dropped


def test_two_sizes_agreeing_by_chance_do_not_end_the_sweep(monkeypatch):
    """Under load a CPU's 256^3 and 512^3 both read 21 GFLOP/s once, and a sweep that stopped where two
    sizes agreed took that for the peak (47 at 1024^3). Three in a row must agree: it goes on doubling."""
    rates = {64: [3e9], 256: [21.0e9], 512: [21.2e9, 30e9], 1024: [47e9, 46e9], 2048: [44e9, 45e9]}
    pts, reached, timed = _sweep(monkeypatch, rates, (64, 256, 512))
    assert not reached and [p.size for p in pts] == [64, 256, 512, 1024, 2048]     # 4096: over MAX_CALL
    assert timed[-3:] == [1024, 2048, 512] and max(p.rate for p in pts) == pytest.approx(47e9)


def test_the_matmul_sweep_does_not_double_into_a_call_longer_than_a_second(monkeypatch):
    """A CPU's 2048^3 bf16 matmul takes about 0.4 s a call: 4096^3 would take eight times that, timed five
    times (two warm-ups, three runs) and again when it is among the fastest. The sweep stops doubling where
    the next call, at the rate of the last, would pass ``MAX_CALL``; the peak is then not reached."""
    from symcost.device import calibrate
    rates = {512: [30e9] * 2, 1024: [35e9] * 2, 2048: [41e9] * 2}
    pts, reached, timed = _sweep(monkeypatch, rates, (512, 1024))
    assert 8 * 2 * 2048 ** 3 / 41e9 > calibrate.MAX_CALL >= 8 * 2 * 1024 ** 3 / 35e9
    assert not reached and [p.size for p in pts] == [512, 1024, 2048]
    assert timed == [512, 1024, 2048, 2048, 1024, 512]


def _calibration(base, platform="gpu", kind="NVIDIA H100 80GB HBM3"):
    info = DeviceInfo(platform, kind, 8, 80e9, "0.0")
    cal = Calibration(info, "2025-01-01 00:00:00 UTC", False, Sweep((1024, 8192), ("bf16",), 1 << 30, 1 << 26, 256,
                                                                      (4096, 1 << 20), 20), "X=8:nvlink", base)
    cal.matmul["bf16"] = [Sample(1024, 2.0 * 1024 ** 3, _timing(2.0 * 1024 ** 3 / 4e14)),
                          Sample(8192, 2.0 * 8192 ** 3, _timing(2.0 * 8192 ** 3 / 7.5e14))]
    cal.copy = Sample(1 << 30, 2.0 * (1 << 30), _timing(2.0 * (1 << 30) / 2.9e12))
    cal.read = Sample(1 << 30, 1.0 * (1 << 30), _timing((1 << 30) / 3.0e12))
    cal.elementwise = Sample(1 << 26, 512.0 * (1 << 26), _timing(512.0 * (1 << 26) / 5e13))
    for kind, bw, lat in (("AllGather", 3.1e11, 9e-6), ("AllReduce", 1.6e11, 14e-6)):
        sizes = [4096.0, float(1 << 20), float(1 << 28)]
        f = fit_line(sizes, [lat + b / bw for b in sizes])
        samples = tuple(Sample(int(b), b, _timing(t)) for b, t in f.points)
        per_byte = (7 / 8) / 4.5e11 * (2 if kind == "AllReduce" else 1)    # the switched model at h100's W_nvlink
        cal.collectives.append(CollectiveFit(kind, "X", 8, "nvlink", samples, f, per_byte, 1.0))
    return cal


def test_a_calibration_of_a_known_chip_keeps_the_datasheet_and_writes_its_efficiency(tmp_path):
    h100 = hardware("h100")
    data = build_preset(_calibration(h100), "my-h100", measured_peaks=False)
    path = tmp_path / "my-h100.toml"
    path.write_text(to_toml(data, "a test"))
    hw = hardware(str(path))
    assert hw.C == h100.C and hw.hbm_bandwidth == h100.hbm_bandwidth    # the datasheet peaks stay
    eff = hw.efficiency
    assert eff.math(2.0 * 8192 ** 3) == pytest.approx(7.5e14 / 9.89e14, abs=1e-3)
    assert eff.math(2.0 * 1024 ** 3) == pytest.approx(4e14 / 9.89e14, abs=1e-3)
    assert eff.hbm == pytest.approx(2.9e12 / 3.35e12, abs=1e-3)
    assert hw.vector_flops == pytest.approx(5e13, rel=1e-3)            # no datasheet figure: measured
    eta, lat = eff.net("nvlink", "AllGather")
    assert eta == pytest.approx(3.1e11 * (7 / 8) / 4.5e11, abs=1e-3) and lat == pytest.approx(9e-6, rel=1e-3)
    assert eff.net("nvlink", "AllReduce")[0] == pytest.approx(1.6e11 * 2 * (7 / 8) / 4.5e11, abs=1e-3)
    src = dict(hw.sources)
    for key in ("efficiency.matmul.bf16", "efficiency.hbm", "efficiency.collectives.nvlink.AllGather", "vector_flops"):
        assert "measured by symcost calibrate on 8 x NVIDIA H100 80GB HBM3" in src[key]
        assert "2025-01-01" in src[key] and "median of 20 runs" in src[key]
    assert src["hbm_bytes"].startswith("not measured: from the h100 preset")
    raw = tomllib.loads(path.read_text())
    assert raw["calibration"]["runs"] == 20 and raw["calibration"]["base"] == "h100"


def test_by_default_a_known_chip_takes_its_measured_figures_as_peaks():
    h100 = hardware("h100")
    cal = _calibration(h100)
    hw = parse(build_preset(cal, "my-h100"), "my-h100.toml")
    assert hw.C == pytest.approx(7.5e14, rel=1e-3)                         # what the engine prices with
    assert hw.hbm_bandwidth == pytest.approx(3.0e12, rel=1e-3)
    assert hw.flops_for("fp8") == pytest.approx(1.979e15 * 7.5e14 / 9.89e14, rel=1e-3)   # scaled, not swept
    assert hw.hbm_bytes == h100.hbm_bytes and hw.dcn_bandwidth == h100.dcn_bandwidth
    src = dict(hw.sources)
    assert "76% of the h100 datasheet's 9.89e+14 FLOP/s" in src["flops.bf16"]
    assert src["flops.fp8"].startswith("not measured: the h100 datasheet's fp8 figure times")
    assert src["dcn_bandwidth"].startswith("not measured: from the h100 preset")
    assert hw.efficiency.math(2.0 * 8192 ** 3) == 1.0
    assert hw.efficiency.math(2.0 * 1024 ** 3) == pytest.approx(4.0 / 7.5, abs=1e-3)
    with pytest.raises(UsageError, match="--peaks datasheet"):
        from symcost.cli.device import _base
        _base(None, "datasheet", DeviceInfo("cpu", "Some CPU", 8, 2e9, "0.0"))


def test_a_device_without_a_datasheet_takes_its_best_figures_as_peaks(tmp_path):
    info = DeviceInfo("cpu", "Some CPU, 4 cores", 8, 2e9, "0.0")
    base = provisional(info)
    cal = _calibration(base, "cpu", "Some CPU, 4 cores")
    cal.device = info
    cal.collectives = [CollectiveFit(c.kind, c.axis, c.devices, "ici", c.samples, c.fit, c.model_per_byte, 7.0)
                       for c in cal.collectives]
    data = build_preset(cal, "cpu-test", measured_peaks=True)
    hw = parse(tomllib.loads(to_toml(data)), "cpu-test.toml")
    assert hw.family == "cpu" and hw.C == pytest.approx(7.5e14, rel=1e-3)
    assert hw.efficiency.math(2.0 * 8192 ** 3) == 1.0
    assert hw.hbm_bandwidth == pytest.approx(3.0e12, rel=1e-3)          # the better of copy and read
    assert hw.efficiency.hbm == pytest.approx(2.9 / 3.0, abs=1e-3)
    etas = {c: hw.efficiency.net("ici", c)[0] for c in ("AllGather", "AllReduce")}
    assert max(etas.values()) == 1.0                                      # the fastest is the link's peak
    assert hw.t_min == pytest.approx((9e-6 / 7 + 14e-6 / 7) / 2, rel=1e-3)


def test_a_bad_calibration_table_or_residual_names_the_field():
    data = build_preset(_calibration(hardware("h100")), "x", measured_peaks=False)
    data["calibration"] = {"when": {"nested": 1}}
    with pytest.raises(UsageError, match="field 'calibration'"):
        parse(data, "x.toml")
    data = build_preset(_calibration(hardware("h100")), "x", measured_peaks=False)
    data["efficiency"]["collectives"]["nvlink"]["AllGather"]["residual"] = -1
    with pytest.raises(UsageError, match="AllGather.residual"):
        parse(data, "x.toml")


def test_a_calibration_keeps_the_base_presets_fractions_where_it_measured_nothing():
    data = build_preset(_calibration(hardware("h100")), "x", measured_peaks=False)
    data["efficiency"]["collectives"]["dcn"] = {"eta": 0.7, "latency": 2e-5}
    data["sources"]["efficiency.collectives.dcn"] = "a test: InfiniBand as measured elsewhere"
    base = parse(data, "base.toml")
    again = parse(build_preset(_calibration(base), "y", measured_peaks=False), "y.toml")
    assert again.efficiency.net("dcn", "AllGather") == (0.7, 2e-5)            # kept, not measured again
    assert dict(again.sources)["efficiency.collectives.dcn"].endswith("InfiniBand as measured elsewhere")
    assert again.efficiency.net("nvlink", "AllGather")[0] == pytest.approx(3.1e11 * (7 / 8) / 4.5e11, abs=1e-3)


def test_a_calibrated_matmul_table_replaces_the_base_presets_waves():
    """The a100 preset reads its best-shape rate as a full wave's and adds each matmul's waves; a measured
    sweep's rates already hold the waves of its sizes, so the calibrated preset drops them. A preset written
    back without a measured matmul keeps them."""
    from symcost.device.preset import _as_data
    a100 = hardware("a100")
    assert parse(_as_data(a100), "a100-copy.toml").efficiency.waves == a100.efficiency.waves
    cal = parse(build_preset(_calibration(a100), "y", measured_peaks=False), "y.toml")
    assert cal.efficiency.waves == ()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.skipif(importlib.util.find_spec("tqdm") is None, reason="progress bars need tqdm (the progress extra)")
def test_a_calibration_advances_a_bar_with_an_end(monkeypatch):
    from symcost import progress
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(progress, "DELAY", 0)
    with progress.showing(True):
        for label in ("matmul bf16 512", "HBM", "elementwise"):
            time.sleep(0.15)                              # tqdm redraws at most every 0.1 s
            progress.advance(1, "calibrating", total=3, unit=" benchmarks", label=label)
    shown = term.getvalue()
    assert "calibrating" in shown and "/3 [" in shown and "HBM" in shown and "benchmarks/s" in shown
    with progress.showing(False):
        progress.advance(1, "calibrating", total=3, unit=" benchmarks", label="HBM")
    assert term.getvalue() == shown                       # off: nothing more


def test_without_jax_the_commands_say_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "jax", None)
    assert main(["calibrate", "--out", "x.toml"]) == 2
    assert "pip install 'symcost[jax]'" in capsys.readouterr().err
    assert main(["measure", "A[I_X] -> A[I]", "--mesh", "X=2", "--dims", "I=4", "--hw", "h100"]) == 2
    assert "pip install 'symcost[jax]'" in capsys.readouterr().err


def test_calibrate_wants_a_toml_file(capsys):
    assert main(["calibrate", "--out", "x.txt"]) == 2
    assert "ends in .toml" in capsys.readouterr().err


# ------------------------------------------------------------------------- end to end on 8 host devices


class _Commands:
    """symcost's command line on the 8 host devices: ``cli(*argv)`` runs one command and returns what
    ``subprocess.run`` would (``returncode``, ``stdout``, ``stderr``). The commands run one after another in
    one process (tests/device/cli_worker.py, started with the environment that gives JAX 8 devices), each
    from ``symcost.cli.main`` as ``python -m symcost.cli`` runs it: JAX is imported and the devices made
    once a module, not once a command (about 1.6 s of each command's start)."""

    def __init__(self, log: Path):
        self.log = log.open("w")
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_worker.py"))],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=EIGHT, cwd=ROOT,
                                text=True)

    def __call__(self, *argv, timeout=600) -> subprocess.CompletedProcess:
        if self.proc.poll() is not None:          # a command that did not answer took the last one down
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([str(a) for a in argv]) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"symcost {' '.join(map(str, argv))}: no answer (the process exited, or the "
                                 f"command ran past {timeout} s; its stderr: "
                                 f"{Path(self.log.name).read_text()[-2000:]})")
        got = json.loads(line)
        return subprocess.CompletedProcess(list(argv), got["code"], got["stdout"], got["stderr"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()               # the process ends at the end of its input
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    commands = _Commands(tmp_path_factory.mktemp("cli") / "stderr.txt")
    yield commands
    commands.close()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, cli):
    """One quick calibration on 8 CPU host devices: its preset file and its --json. ``make test`` names a
    folder in SYMCOST_TEST_CALIBRATION so that its two runs of pytest (the timing tests alone, then the rest)
    share one calibration of these devices: the first writes it there, the second reads it.

    It is ``calibrate --quick --dtypes bf16 --runs 3``, the command as a user runs it for the dtype these
    tests price (a CPU's quick sweep also measures fp32, which no test reads): the bf16 matmul sweep doubles
    past its listed sizes, which the timing test of the peak needs, until three sizes agree or the next call
    would take over a second (a sweep that stopped early under load left the peak below what a large einsum
    reaches, which that test catches); every collective is fitted over four sizes (the fit tests need three or more, from at most
    8 kB to at least 1 MB); three timed runs a point (medians of three, as the tests check)."""
    if not HAS_JAX:
        pytest.skip("calibrate needs the jax extra: pip install 'symcost[jax]'")
    kept = os.environ.get("SYMCOST_TEST_CALIBRATION")
    folder = Path(kept) if kept else tmp_path_factory.mktemp("cal")
    out, report = folder / "cpu8.toml", folder / "cpu8.json"
    if kept and out.exists() and report.exists():
        return out, json.loads(report.read_text())
    r = cli("calibrate", "--quick", "--dtypes", "bf16", "--out", str(out), "--json", "--runs", "3")
    assert r.returncode == 0, r.stderr
    report.write_text(r.stdout)
    return out, json.loads(r.stdout)


@pytest.mark.slow
@NEEDS_JAX
def test_calibrate_writes_a_preset_that_loads_back(calibrated, capsys):
    import jsonschema
    path, report = calibrated
    jsonschema.validate(report, json.loads((SCHEMAS / "calibrate.json").read_text()))
    assert report["device"] == {**report["device"], "platform": "cpu", "count": 8} and report["runs"] == 3
    hw = symcost.hardware(str(path))
    assert hw.family == "cpu" and hw.C > 0 and hw.hbm_bandwidth > 0 and hw.vector_flops > 0
    pts = dict(hw.efficiency.matmul)["bf16"]
    assert [f for f, _ in pts] == sorted(f for f, _ in pts) and all(0 < e <= 1 for _, e in pts)
    assert max(e for _, e in pts) == 1.0                      # a CPU's best matmul is its peak
    src = dict(hw.sources)
    for kind in ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Permute"):
        eta, latency = hw.efficiency.net("nvlink", kind)      # host devices: one switched domain
        assert 0 < eta <= 1 and latency >= 0
        assert "measured by symcost calibrate on 8 x " in src[f"efficiency.collectives.nvlink.{kind}"]
        assert "median of 3 runs" in src[f"efficiency.collectives.nvlink.{kind}"]
    assert {c["kind"] for c in report["collectives"]} == {"AllGather", "ReduceScatter", "AllReduce", "AllToAll",
                                                          "Permute"}
    raw = tomllib.loads(path.read_text())
    assert raw["calibration"]["devices"] == 8 and raw["calibration"]["quick"] is True
    plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=8", dims="I=512,J=512,K=512", hw=str(path))
    assert plan.numeric()["t_step"] > 0                       # the API takes it
    assert main(["derive", "A[I, J_X] * B[J_X, K] -> C[I, K]", "--mesh", "X=8", "--dims", "I=512,J=512,K=512",
                 "--hw", str(path), "--json"]) == 0           # and so does --hw FILE
    derived = json.loads(capsys.readouterr().out)
    assert derived["numeric"]["t_step"] == pytest.approx(plan.numeric()["t_step"], rel=1e-9)


@pytest.mark.slow
@NEEDS_JAX
def test_each_fitted_line_reproduces_its_measured_points_within_its_residual(calibrated):
    path, report = calibrated
    raw = tomllib.loads(path.read_text())
    for c in report["collectives"]:
        assert len(c["points"]) >= 3
        assert c["points"][0]["bytes"] <= 8192 and c["points"][-1]["bytes"] >= 1 << 20   # latency- to bandwidth-bound
        for p in c["points"]:
            fitted = c["latency"] + p["bytes"] / c["bandwidth"]
            assert abs(fitted - p["seconds"]) / p["seconds"] <= c["residual"] + 1e-9
        written = raw["efficiency"]["collectives"]["nvlink"][c["kind"]]
        assert c["residual"] <= written["residual"] <= c["residual"] * 1.01     # written as a bound that holds
        assert written["latency"] == pytest.approx(c["latency"], rel=1e-3)


@pytest.mark.slow
@NEEDS_JAX
def test_measure_reports_what_it_ran(cli, calibrated, tmp_path):
    import jsonschema
    path, _ = calibrated
    expr, mesh, dims = "In[B_X, D_Y] *_D W[D_Y, F] -> Out[B_X, F]", "X=2,Y=4", "B=256,D=512,F=256"
    r = cli("measure", expr, "--mesh", mesh, "--dims", dims, "--hw", str(path), "--json", "--runs", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    jsonschema.validate(out, json.loads((SCHEMAS / "measure.json").read_text()))
    plan = symcost.derive(expr, mesh=mesh, dims=dims, hw=str(path))
    assert [s["step"] for s in out["steps"]] == [s.signature() for s in plan.steps]
    assert [s["kind"] for s in out["steps"]] == ["Einsum", "AllReduce"]
    assert out["predicted"]["seconds"] == pytest.approx(plan.numeric()["t_step"], rel=1e-9)
    for s, step in zip(out["steps"], plan.steps):
        assert s["predicted"]["seconds"] == pytest.approx(plan.evaluate(step.seconds), rel=1e-9)
        assert s["measured"]["runs"] == 3 and s["measured"]["seconds"] > 0
    assert out["measured"]["runs"] == 3
    assert out["ratio"] == pytest.approx(out["measured"]["seconds"] / out["predicted"]["seconds"])
    assert out["what"] == {"kind": "program", "expression": expr, "mesh": "X=2:nvlink,Y=4:nvlink",
                           "dims": {"B": 256, "D": 512, "F": 256}}
    assert out["device"]["count"] == 8 and out["hardware"] == "cpu8"


@pytest.mark.slow
@NEEDS_JAX
def test_measure_runs_elementwise_work(cli, calibrated):
    """A plan's norms, activations and adds run as ``export-jax`` writes them, each step timed beside its
    prediction (the layer Megatron's sequence parallelism plans, on 8 host devices)."""
    path, _ = calibrated
    layer, dims = str(ROOT / "examples" / "megatron_sp_layer.sc"), "B=2,T=64,S=64,D=64,K=8,G=1,H=8,F=256"
    r = cli("measure", layer, "--mesh", "Y=8", "--dims", dims, "--hw", str(path), "--json", "--runs", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    plan = symcost.derive(open(layer).read(), mesh="Y=8", dims=dims, hw=str(path))
    assert [s["step"] for s in out["steps"]] == [s.signature() for s in plan.steps]
    kinds = {s["kind"] for s in out["steps"]}
    assert {"LayerNorm", "Softmax", "GeLU", "Dropout", "Add", "AllGather", "ReduceScatter", "Einsum"} <= kinds
    assert all(s["measured"]["seconds"] > 0 for s in out["steps"])
    assert out["measured"]["seconds"] > 0 and out["ratio"] > 0
    identity = [s for s in out["steps"] if s["identity"]]         # dropout, as export-jax lowers it: no ratio
    assert {s["kind"] for s in identity} == {"Dropout"} and len(identity) == 3
    assert all(s["ratio"] is None for s in identity) and out["worst"]["step"] not in {s["step"] for s in identity}


@pytest.mark.slow
@NEEDS_JAX
def test_measure_predicts_at_the_achieved_figures_when_asked(cli, calibrated, tmp_path):
    """``measure --efficiency`` sets the run beside the prediction at the preset's achieved figures (as
    ``derive --efficiency`` prices the plan: the calibration's matmul efficiency by size), not at its peaks;
    a model's layer stack too. The JSON says which."""
    import jsonschema
    path, _ = calibrated
    expr, dims = "A[I_X, J] *_J B[J, K] -> C[I_X, K]", "I=256,J=256,K=256"
    base = ["measure", expr, "--mesh", "X=8", "--dims", dims, "--hw", str(path), "--json", "--runs", "3", "--no-steps"]
    peaks, achieved = (json.loads(cli(*base, *extra).stdout) for extra in ((), ("--efficiency",)))
    assert peaks["predicted"]["at"] == "peaks" and achieved["predicted"]["at"] == "achieved"
    jsonschema.validate(achieved, json.loads((SCHEMAS / "measure.json").read_text()))
    plan = symcost.derive(expr, mesh="X=8", dims=dims, hw=str(path), efficiency=True)
    assert achieved["predicted"]["seconds"] == pytest.approx(plan.numeric()["t_step"], rel=1e-9)
    assert achieved["predicted"]["seconds"] > peaks["predicted"]["seconds"]   # a small matmul: below the peak
    r = cli("measure", str(_tiny(tmp_path)), "--decode", "--batch", "8", "--seq", "64", "--chips", "8", "--layers", "1",
            "--hw", str(path), "--runs", "2", "--no-steps", "--efficiency")
    assert r.returncode == 0, r.stderr
    assert "predicted" in r.stdout and "(at the preset's achieved figures, overlap: step;" in r.stdout


@pytest.mark.slow
@NEEDS_JAX
def test_measure_runs_a_models_layer_stack(cli, calibrated, tmp_path):
    import jsonschema
    path, _ = calibrated
    cfg = _tiny(tmp_path)
    r = cli("measure", str(cfg), "--decode", "--batch", "8", "--seq", "64", "--chips", "8", "--layers", "2",
             "--hw", str(path), "--json", "--runs", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    jsonschema.validate(out, json.loads((SCHEMAS / "measure.json").read_text()))
    assert out["what"]["kind"] == "model" and out["what"]["layers"] == 2 and out["what"]["of_layers"] == 4
    assert out["what"]["mesh"] == "Y=2,Z=4"
    from symcost.models.config import load_model_config
    from symcost.models.transformer import head_program, layer_program, sizes
    from symcost.models.inference import default_mesh
    from symcost.program import derive_program
    c = load_model_config(str(cfg))
    m, sh = default_mesh(c, 8)
    dims = sizes(c, batch=8, seq=1, context=64)
    layer = derive_program(layer_program(c, sh), mesh=m, dims=dims, hw=str(path), moves="all", overlap="step")
    head = derive_program(head_program(c, sh), mesh=m, dims=dims, hw=str(path), moves="all", overlap="step")
    assert [s["step"] for s in out["steps"]] == [s.signature() for s in layer.steps + head.steps]
    assert {"RMSNorm", "Rotary", "SiLU", "Mul", "Add"} <= {s["kind"] for s in out["steps"]}   # the whole layer
    want = 2 * layer.numeric()["t_step"] + head.numeric()["t_step"]
    assert out["predicted"]["seconds"] == pytest.approx(want, rel=1e-9)


@pytest.mark.slow
@NEEDS_JAX
def test_measure_runs_a_training_step_forward_and_backward(cli, calibrated, tmp_path):
    path, _ = calibrated
    # eight key/value heads, so that every gradient's layout divides the 8 devices whatever the measured
    # preset makes the engine choose (with K=2 on Y=2,Z=4 a calibration's noise can tip the backward pass
    # to dWo over YZ, padded blocks that measure refuses to run -- a clear error, but not this test's point)
    cfg = _tiny(tmp_path, K=8)
    r = cli("measure", str(cfg), "--train", "--batch", "8", "--seq", "64", "--chips", "8", "--layers", "1",
             "--hw", str(path), "--json", "--runs", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["what"]["mode"] == "train" and out["measured"]["seconds"] > 0
    assert {s["phase"] for s in out["steps"]} == {"forward", "backward"}
    assert sum(s["phase"] == "backward" for s in out["steps"]) > sum(s["phase"] == "forward" for s in out["steps"])
    backward = {s["kind"] for s in out["steps"] if s["phase"] == "backward"}
    assert {"RMSNorm", "SiLU", "Mul"} <= backward        # the elementwise gradients run too (jax.vjp of each)


@pytest.mark.slow
@NEEDS_JAX
@pytest.mark.skipif(not HAS_MPL, reason="plots need matplotlib: pip install 'symcost[plot]'")
def test_measure_sweeps_and_plots(cli, calibrated, tmp_path):
    path, _ = calibrated
    png = tmp_path / "sweep.png"
    r = cli("measure", "A[I_X, J] *_J B[J, K] -> C[I_X, K]", "--mesh", "X=8", "--dims", "I=1024,J=256,K=256",
             "--hw", str(path), "--vs", "I", "--values", "256,1024", "--no-steps", "--runs", "3", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "sweep over I:" in r.stdout and "I=256" in r.stdout and f"wrote {png}" in r.stdout
    import matplotlib.image as mpimg
    img = mpimg.imread(png)
    assert img.shape[0] > 200 and img.std() > 0.05


@pytest.mark.slow
@NEEDS_JAX
def test_measure_says_what_it_needs(cli, calibrated):
    path, _ = calibrated
    r = cli("measure", "A[I_X, J] *_J B[J, K] -> C[I_X, K]", "--mesh", "X=8", "--dims", "I=64", "--hw", str(path))
    assert r.returncode == 2 and "J, K have no size" in r.stderr and "Traceback" not in r.stderr
    r = cli("measure", "A[I_X, J] *_J B[J, K] -> C[I_X, K]", "--mesh", "X=8", "--dims", "I=64,J=8,K=8")
    assert r.returncode == 2 and "give --hw FILE" in r.stderr
    r = cli("measure", "A[I_X, J] *_J B[J, K] -> C[I_X, K]", "--mesh", "X=16", "--dims", "I=64,J=8,K=8",
             "--hw", str(path))
    assert r.returncode == 2 and "needs 16 devices; JAX sees 8" in r.stderr
    r = cli("measure", "llama3-8b", "--decode", "--prefill", "--batch", "1", "--hw", str(path))
    assert r.returncode == 2 and "one of --decode, --prefill or --train" in r.stderr


@pytest.mark.slow
@pytest.mark.timing
@NEEDS_JAX
def test_the_cpu_calibration_reaches_the_peak_a_large_einsum_reaches(cli, calibrated):
    """The matmul sweep goes on past its listed sizes until three sizes agree (or one call would take over a
    second), so the preset's peak is not below what a large einsum on the same 8 host devices reaches
    (within 10 %): each device's 1024^3 block of a sharded einsum, all devices at once, as the calibration
    runs them."""
    path, report = calibrated
    assert len(report["matmul"]["bf16"]) > 3 or report["peak_reached"]["bf16"]     # not stopped at 512^3
    hw = symcost.hardware(str(path))
    r = cli("measure", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--mesh", "X=8", "--dims", "I=8192,J=1024,K=1024",
             "--hw", str(path), "--json", "--runs", "3", "--no-steps")
    assert r.returncode == 0, r.stderr
    rate = 2 * 1024 ** 3 / json.loads(r.stdout)["measured"]["seconds"]
    assert rate <= 1.10 * hw.C


#: README examples measured on 8 forced CPU devices stay within this factor of their prediction from a
#: quick calibration of the same devices (docs/kernels.md states it). The layers measure 1.6-1.75 x; the
#: Case 2 matmul 3.0-3.2 x on a quiet machine and up to 4.07 x under load (a clean clone's `make test`,
#: 2026-11-26), its 8 MB AllReduce priced beyond the 4 kB-2 MB sizes the quick calibration fits
MEASURE_FACTOR = 5.0


@pytest.mark.slow
@pytest.mark.timing
@NEEDS_JAX
@pytest.mark.parametrize("expr,mesh,dims", [
    ("In[B_X, D_Y] *_D W[D_Y, F] -> Out[B_X, F]", "X=2,Y=4", "B=2048,D=2048,F=2048"),
    ("A[I, J_X] * B[J_X, K] -> C[I, K]", "X=8", "I=2048,J=2048,K=2048"),
    ("In[B_X, D] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D]", "X=2,Y=4", "B=2048,D=1024,F=4096"),
])
def test_measure_of_readme_examples_stays_within_the_stated_factor(cli, calibrated, expr, mesh, dims):
    """The median of five runs: the Case 2 matmul's whole read 3.1, 3.5 and 4.06 x in three runs of three
    under load (a run slowed by other work moves a median of three)."""
    path, _ = calibrated
    r = cli("measure", expr, "--mesh", mesh, "--dims", dims, "--hw", str(path), "--json", "--runs", "5")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert 1 / MEASURE_FACTOR <= out["ratio"] <= MEASURE_FACTOR
    worst = max((s for s in out["steps"] if s["ratio"]), key=lambda s: abs(math.log(s["ratio"])))
    assert out["worst"]["step"] == worst["step"]             # measure names its worst step
