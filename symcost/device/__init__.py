"""symcost on the devices: calibrate a preset from microbenchmarks, and measure plans against predictions.

    symcost calibrate --quick --out my-h100.toml          # matmul, HBM, elementwise, collectives -> a preset
    symcost measure "In[B_X, D] *_D W[D, F_X] -> Out[B_X, F_X]" --mesh X=8 --dims B=8192,D=8192,F=28672 \\
        --hw my-h100.toml                                  # measured next to predicted, step by step

Everything here needs JAX (the ``jax`` extra) and imports it only when it runs; on a machine without an
accelerator ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` gives JAX eight CPU devices.

- :mod:`~symcost.device.timing`: the timing harness (warm-up, block until ready, median of N, spread);
- :mod:`~symcost.device.fit`: latency + bytes / bandwidth, fitted with its residual;
- :mod:`~symcost.device.runtime`: the devices, dtypes, random arrays in their shardings;
- :mod:`~symcost.device.programs`: plans as compiled ``shard_map`` functions (the ``export-jax`` lowering);
- :mod:`~symcost.device.bench`, :mod:`~symcost.device.calibrate`, :mod:`~symcost.device.preset`: the
  microbenchmarks, the calibration, and the preset file it writes;
- :mod:`~symcost.device.measure`, :mod:`~symcost.device.stack`, :mod:`~symcost.device.chart`: a plan or
  a model's layer stack run and timed against its prediction, and the chart of a sweep.
"""
from .fit import LineFit, fit_line
from .timing import Timing, time_call

__all__ = ["LineFit", "fit_line", "Timing", "time_call"]
